package main

import (
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/models"
)

var memberJSON = regexp.MustCompile(`^\{"data":\{"id":"[1-9][0-9]*","external_id":"u-42","email":"ada@example\.com","name":"Ada","created_at":"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00"\}\}$`)

func TestMembersOverHTTP(t *testing.T) {
	e := startAPI(t)
	tn := testenv.MustTenant(t, e.DB, false)
	other := testenv.MustTenant(t, e.DB, false)

	res := e.doJSON(t, "POST", "/api/platform/members", tn.Token, map[string]any{"email": " ada@example.com ", "name": "Ada", "external_id": "u-42", "role": "ignored"})
	if res.Status != 201 || !memberJSON.Match(res.Body) {
		t.Fatalf("create: %d %s", res.Status, res.Body)
	}
	var ada memberBody
	mustData(t, res, 201, &ada)

	t.Run("got by id and by external id, percent-encoded", func(t *testing.T) {
		for _, ref := range []string{ada.ID, "external:u-42", "external:" + url.PathEscape("u-42"), "external%3Au-42"} {
			if res := e.doJSON(t, "GET", "/api/platform/members/"+ref, tn.Token, nil); res.Status != 200 || !memberJSON.Match(res.Body) {
				t.Fatalf("GET %s: %d %s", ref, res.Status, res.Body)
			}
		}
		odd := e.doJSON(t, "POST", "/api/platform/members", tn.Token, map[string]any{"email": "odd@example.com", "external_id": "a/b c?d#é"})
		var m memberBody
		mustData(t, odd, 201, &m)
		res := e.doJSON(t, "GET", "/api/platform/members/external:"+url.PathEscape("a/b c?d#é"), tn.Token, nil)
		var got memberBody
		mustData(t, res, 200, &got)
		if got.ID != m.ID {
			t.Fatalf("external id with reserved characters found %s, want %s", got.ID, m.ID)
		}
	})

	t.Run("another tenant's member, an unknown one and a bad reference are the same 404", func(t *testing.T) {
		for _, ref := range []string{ada.ID, "external:u-42", "999999", "abc", "external:", "0"} {
			assertBody(t, e.doJSON(t, "GET", "/api/platform/members/"+ref, other.Token, nil), 404, `{"message":"Not Found."}`)
		}
		assertBody(t, e.doJSON(t, "PATCH", "/api/platform/members/"+ada.ID, other.Token, map[string]any{"name": "Eve"}), 404, `{"message":"Not Found."}`)
		assertBody(t, e.doJSON(t, "GET", "/api/platform/members/"+ada.ID+"/entitlements", other.Token, nil), 404, `{"message":"Not Found."}`)
		assertBody(t, e.doJSON(t, "GET", "/api/platform/members/"+ada.ID+"/purchases", other.Token, nil), 404, `{"message":"Not Found."}`)
		var m models.AudienceMember
		testenv.Must(t, e.DB.Take(&m, ada.ID).Error)
		if m.Name != "Ada" {
			t.Fatalf("another tenant's PATCH changed the name to %q", m.Name)
		}
	})

	t.Run("PATCH changes what is sent; null clears name and external id", func(t *testing.T) {
		res := e.doJSON(t, "PATCH", "/api/platform/members/external:u-42", tn.Token, map[string]any{"name": "Ada L."})
		var m memberBody
		mustData(t, res, 200, &m)
		if m.Name == nil || *m.Name != "Ada L." || m.Email != "ada@example.com" || m.ExternalID == nil || *m.ExternalID != "u-42" {
			t.Fatalf("after PATCH name: %s", res.Body)
		}
		res = e.doJSON(t, "PATCH", "/api/platform/members/"+ada.ID, tn.Token, `{"name":null,"external_id":null}`)
		want := fmt.Sprintf(`{"data":{"id":"%s","external_id":null,"email":"ada@example.com","name":null,"created_at":"%s"}}`, ada.ID, ada.CreatedAt)
		assertBody(t, res, 200, want)
		assertBody(t, e.doJSON(t, "GET", "/api/platform/members/external:u-42", tn.Token, nil), 404, `{"message":"Not Found."}`)
		res = e.doJSON(t, "PATCH", "/api/platform/members/"+ada.ID, tn.Token, map[string]any{"external_id": "u-42", "email": "ada@new.example"})
		mustData(t, res, 200, &m)
		if m.Email != "ada@new.example" || *m.ExternalID != "u-42" {
			t.Fatalf("after PATCH email: %s", res.Body)
		}
	})

	t.Run("bad input is 422 with Laravel's messages and changes nothing", func(t *testing.T) {
		long := strings.Repeat("a", 250) + "@example.com"
		cases := []struct {
			method, path string
			body         any
			want         string
		}{
			{"POST", "/api/platform/members", `{}`, `{"message":"The email field is required.","errors":{"email":["The email field is required."]}}`},
			{"POST", "/api/platform/members", `not json`, `{"message":"The email field is required.","errors":{"email":["The email field is required."]}}`},
			{"POST", "/api/platform/members", map[string]any{"email": "   "}, `{"message":"The email field is required.","errors":{"email":["The email field is required."]}}`},
			{"POST", "/api/platform/members", map[string]any{"email": "not-an-address"}, `{"message":"The email field must be a valid email address.","errors":{"email":["The email field must be a valid email address."]}}`},
			{"POST", "/api/platform/members", map[string]any{"email": long}, `{"message":"The email field must not be greater than 254 characters.","errors":{"email":["The email field must not be greater than 254 characters."]}}`},
			{"POST", "/api/platform/members", map[string]any{"email": 42}, `{"message":"The email field must be a string. (and 1 more error)","errors":{"email":["The email field must be a string.","The email field must be a valid email address."]}}`},
			{"POST", "/api/platform/members", map[string]any{"email": "b@example.com", "name": strings.Repeat("n", 256), "external_id": strings.Repeat("x", 192)},
				`{"message":"The name field must not be greater than 255 characters. (and 1 more error)","errors":{"name":["The name field must not be greater than 255 characters."],"external_id":["The external id field must not be greater than 191 characters."]}}`},
			{"POST", "/api/platform/members", map[string]any{"email": "b@example.com", "external_id": "u-42"}, `{"message":"The external id has already been taken.","errors":{"external_id":["The external id has already been taken."]}}`},
			{"POST", "/api/platform/members", "{\"email\":\"b@example.com\",\"name\":\"a\xffb\"}", `{"message":"The name field format is invalid.","errors":{"name":["The name field format is invalid."]}}`},
			{"PATCH", "/api/platform/members/" + ada.ID, `{"email":null}`, `{"message":"The email field is required.","errors":{"email":["The email field is required."]}}`},
			{"PATCH", "/api/platform/members/" + ada.ID, map[string]any{"external_id": []string{"x"}}, `{"message":"The external id field must be a string.","errors":{"external_id":["The external id field must be a string."]}}`},
		}
		before := e.memberRows(t, tn.ID)
		var snapshot models.AudienceMember
		testenv.Must(t, e.DB.Take(&snapshot, ada.ID).Error)
		for _, c := range cases {
			assertBody(t, e.doJSON(t, c.method, c.path, tn.Token, c.body), 422, c.want)
		}
		if n := e.memberRows(t, tn.ID); n != before {
			t.Fatalf("%d members after refused requests, want %d", n, before)
		}
		var after models.AudienceMember
		testenv.Must(t, e.DB.Take(&after, ada.ID).Error)
		if after.Email != snapshot.Email || after.Name != snapshot.Name || *after.ExternalID != *snapshot.ExternalID {
			t.Fatalf("a refused PATCH changed the member: %+v", after)
		}
	})

	t.Run("an external id is unique within a tenant only, also under concurrent creates", func(t *testing.T) {
		var m memberBody
		mustData(t, e.doJSON(t, "POST", "/api/platform/members", other.Token, map[string]any{"email": "x@example.com", "external_id": "u-42"}), 201, &m)
		statuses := make([]int, 8)
		var wg sync.WaitGroup
		for i := range statuses {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				statuses[i] = e.doJSON(t, "POST", "/api/platform/members", tn.Token, map[string]any{"email": "race@example.com", "external_id": "race-1"}).Status
			}(i)
		}
		wg.Wait()
		created := 0
		for _, s := range statuses {
			switch s {
			case 201:
				created++
			case 422:
			default:
				t.Fatalf("statuses %v: only 201 and 422 expected", statuses)
			}
		}
		if created != 1 || e.count(t, &models.AudienceMember{}, "tenant_id = ? AND external_id = ?", tn.ID, "race-1") != 1 {
			t.Fatalf("statuses %v: want one 201", statuses)
		}
	})

	t.Run("abilities: members:read reads, members:write writes", func(t *testing.T) {
		reader := testenv.MustTenant(t, e.DB, false, "members:read")
		writer := testenv.MustTenant(t, e.DB, false, "members:write")
		events := testenv.MustTenant(t, e.DB, false, "events:read")
		assertBody(t, e.doJSON(t, "POST", "/api/platform/members", reader.Token, map[string]any{"email": "r@example.com"}), 403, `{"message":"Invalid ability provided."}`)
		assertBody(t, e.doJSON(t, "GET", "/api/platform/members", writer.Token, nil), 403, `{"message":"Invalid ability provided."}`)
		assertBody(t, e.doJSON(t, "GET", "/api/platform/members", events.Token, nil), 403, `{"message":"Invalid ability provided."}`)
		assertBody(t, e.doJSON(t, "GET", "/api/platform/members", "", nil), 401, `{"message":"Unauthenticated."}`)
		if res := e.doJSON(t, "POST", "/api/platform/members", writer.Token, map[string]any{"email": "w@example.com"}); res.Status != 201 {
			t.Fatalf("writer: %d %s", res.Status, res.Body)
		}
		if res := e.doJSON(t, "GET", "/api/platform/members", reader.Token, nil); res.Status != 200 {
			t.Fatalf("reader: %d %s", res.Status, res.Body)
		}
		if n := e.count(t, &models.AudienceMember{}, "tenant_id = ?", reader.ID); n != 0 {
			t.Fatalf("a refused create stored %d members", n)
		}
	})
}

func TestMemberListIsLaravelsCursorPagination(t *testing.T) {
	e := startAPI(t)
	tn := testenv.MustTenant(t, e.DB, false)
	var ids []string
	for i := 0; i < 7; i++ {
		var m memberBody
		mustData(t, e.doJSON(t, "POST", "/api/platform/members", tn.Token, map[string]any{"email": fmt.Sprintf("m%d@example.com", i%3)}), 201, &m)
		ids = append(ids, m.ID)
	}

	first := e.doJSON(t, "GET", "/api/platform/members?per_page=2&email=m0%40example.com", tn.Token, nil)
	var p listPage[memberBody]
	if first.Status != 200 || json.Unmarshal(first.Body, &p) != nil {
		t.Fatalf("%d %s", first.Status, first.Body)
	}
	if !strings.HasPrefix(string(first.Body), `{"data":[{"id":"`) || !strings.Contains(string(first.Body), `"links":{"first":null,"last":null,"prev":null,"next":"`) {
		t.Fatalf("not Laravel's shape: %s", first.Body)
	}
	if len(p.Data) != 2 || p.Data[0].ID != ids[0] || p.Data[1].ID != ids[3] || p.Meta.PerPage != 2 ||
		p.Meta.Path != e.Main.Config.AppURL+"/api/platform/members" || p.Links.Prev != nil || p.Meta.PrevCursor != nil {
		t.Fatalf("first page of the filter: %s", first.Body)
	}
	if p.Links.Next == nil || *p.Links.Next != e.Main.Config.AppURL+"/api/platform/members?per_page=2&email=m0%40example.com&cursor="+*p.Meta.NextCursor {
		t.Fatalf("next link %v does not keep the query", p.Links.Next)
	}
	last := e.Do(t, "GET", strings.TrimPrefix(*p.Links.Next, e.Main.Config.AppURL), tn.Token, nil)
	var p2 listPage[memberBody]
	if json.Unmarshal(last.Body, &p2) != nil || len(p2.Data) != 1 || p2.Data[0].ID != ids[6] || p2.Links.Next != nil || p2.Links.Prev == nil {
		t.Fatalf("after the last item: %s", last.Body)
	}

	t.Run("links start with APP_URL whatever the forwarded headers say", func(t *testing.T) {
		res := e.Do(t, "GET", "/api/platform/members?per_page=2", tn.Token, nil,
			"X-Forwarded-Host", "attacker.example", "X-Forwarded-Proto", "javascript")
		var page listPage[memberBody]
		if res.Status != 200 || json.Unmarshal(res.Body, &page) != nil || page.Links.Next == nil {
			t.Fatalf("%d %s", res.Status, res.Body)
		}
		want := e.Main.Config.AppURL + "/api/platform/members"
		if page.Meta.Path != want || !strings.HasPrefix(*page.Links.Next, want+"?") {
			t.Fatalf("path %q, next %q: want both from APP_URL %q", page.Meta.Path, *page.Links.Next, e.Main.Config.AppURL)
		}
	})

	t.Run("following next visits every member once while members are created", func(t *testing.T) {
		seen := map[string]int{}
		path := "/api/platform/members?per_page=2"
		for pages := 0; path != ""; pages++ {
			res := e.Do(t, "GET", path, tn.Token, nil)
			var page listPage[memberBody]
			if res.Status != 200 || json.Unmarshal(res.Body, &page) != nil || pages > 20 {
				t.Fatalf("%d %s", res.Status, res.Body)
			}
			for _, m := range page.Data {
				seen[m.ID]++
			}
			e.doJSON(t, "POST", "/api/platform/members", tn.Token, map[string]any{"email": fmt.Sprintf("new%d@example.com", pages)})
			path = ""
			if page.Links.Next != nil {
				path = strings.TrimPrefix(*page.Links.Next, e.Main.Config.AppURL)
			}
		}
		for _, id := range ids {
			if seen[id] != 1 {
				t.Fatalf("member %s seen %d times: %v", id, seen[id], seen)
			}
		}
		if int64(len(seen)) != e.memberRows(t, tn.ID)-1 { // the last page's create came after it
			t.Fatalf("saw %d members of %d", len(seen), e.memberRows(t, tn.ID))
		}
	})

	t.Run("prev leads back to the page before", func(t *testing.T) {
		res := e.Do(t, "GET", "/api/platform/members?per_page=2", tn.Token, nil)
		var p1, p2, back listPage[memberBody]
		testenv.Must(t, json.Unmarshal(res.Body, &p1))
		testenv.Must(t, json.Unmarshal(e.Do(t, "GET", strings.TrimPrefix(*p1.Links.Next, e.Main.Config.AppURL), tn.Token, nil).Body, &p2))
		if p2.Links.Prev == nil {
			t.Fatal("no prev on the second page")
		}
		testenv.Must(t, json.Unmarshal(e.Do(t, "GET", strings.TrimPrefix(*p2.Links.Prev, e.Main.Config.AppURL), tn.Token, nil).Body, &back))
		if len(back.Data) != 2 || back.Data[0].ID != p1.Data[0].ID || back.Data[1].ID != p1.Data[1].ID || back.Links.Prev != nil || back.Links.Next == nil {
			t.Fatalf("prev of page 2: %+v, want page 1 %+v", back.Data, p1.Data)
		}
	})

	t.Run("per_page is 1 to 100; an unreadable cursor is the first page", func(t *testing.T) {
		assertBody(t, e.Do(t, "GET", "/api/platform/members?per_page=0", tn.Token, nil), 422, `{"message":"The per page field must be at least 1.","errors":{"per_page":["The per page field must be at least 1."]}}`)
		assertBody(t, e.Do(t, "GET", "/api/platform/members?per_page=101", tn.Token, nil), 422, `{"message":"The per page field must not be greater than 100.","errors":{"per_page":["The per page field must not be greater than 100."]}}`)
		assertBody(t, e.Do(t, "GET", "/api/platform/members?per_page=x", tn.Token, nil), 422, `{"message":"The per page field must be an integer.","errors":{"per_page":["The per page field must be an integer."]}}`)
		res := e.Do(t, "GET", "/api/platform/members?cursor=garbage&per_page=1", tn.Token, nil)
		var p listPage[memberBody]
		if json.Unmarshal(res.Body, &p) != nil || len(p.Data) != 1 || p.Data[0].ID != ids[0] {
			t.Fatalf("bad cursor: %s", res.Body)
		}
	})
}
