package main

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/models"
)

const adminToken = "adm_0123456789abcdef0123456789abcdef"

func TestOperatorAPIIsOffWithoutTokens(t *testing.T) {
	e := startAPI(t)
	for _, path := range []string{"/api/admin/tenants", "/api/admin/tenants/1", "/api/admin/nothing"} {
		assertBody(t, e.doJSON(t, "GET", path, adminToken, nil), 404, `{"message":"Not Found."}`)
	}
	assertBody(t, e.doJSON(t, "POST", "/api/admin/tenants", adminToken, map[string]any{"name": "X"}), 404, `{"message":"Not Found."}`)
	if n := e.count(t, &models.Tenant{}, "1 = 1"); n != 0 {
		t.Fatalf("%d tenants", n)
	}
}

func TestOperatorAPI(t *testing.T) {
	e := startAPI(t, "ADMIN_API_TOKENS=other-operator-token-000000000000,"+adminToken)
	b := startAPIOn(t, e.Redis, e.DB, e.DBURL, "ADMIN_API_TOKENS="+adminToken)

	t.Run("a missing or wrong token is 401", func(t *testing.T) {
		for _, tok := range []string{"", "wrong", adminToken + "x", strings.TrimSuffix(adminToken, "f")} {
			assertBody(t, e.doJSON(t, "GET", "/api/admin/tenants", tok, nil), 401, `{"message":"Unauthenticated."}`)
		}
		tn := testenv.MustTenant(t, e.DB, false) // a tenant's token is no operator's
		assertBody(t, e.doJSON(t, "GET", "/api/admin/tenants", tn.Token, nil), 401, `{"message":"Unauthenticated."}`)
		res := e.Do(t, "GET", "/api/admin/tenants", "", nil, "Authorization", adminToken) // no Bearer
		assertBody(t, res, 401, `{"message":"Unauthenticated."}`)
	})

	res := e.doJSON(t, "POST", "/api/admin/tenants", adminToken, map[string]any{"name": " Acme ", "psp_account_id": "acct_acme",
		"allowed_hostnames": []string{"Shop.Example", "*.blog.example"}, "redact_query_params": []string{"email", "token"}})
	if !regexp.MustCompile(`^\{"data":\{"id":"[1-9][0-9]*","name":"Acme","site_key":"site_[0-9a-f]{32}","psp_account_id":"acct_acme","allowed_hostnames":\["shop\.example","blog\.example"\],"redact_query_params":\["email","token"\],"features":\{"UseQueueEvents":false,"AnonymizeIp":false\},"created_at":"[^"]+\+00:00"\}\}$`).Match(res.Body) {
		t.Fatalf("create: %d %s", res.Status, res.Body)
	}
	var acme tenantBody
	mustData(t, res, 201, &acme)

	t.Run("get, list and a minimal create", func(t *testing.T) {
		assertBody(t, e.doJSON(t, "GET", "/api/admin/tenants/"+acme.ID, adminToken, nil), 200, string(res.Body))
		var bare tenantBody
		mustData(t, e.doJSON(t, "POST", "/api/admin/tenants", adminToken, map[string]any{"name": "Bare"}), 201, &bare)
		if bare.PSPAccountID != nil || len(bare.AllowedHostnames) != 0 || bare.AllowedHostnames == nil || bare.RedactQueryParams == nil {
			t.Fatalf("%+v", bare)
		}
		var page listPage[tenantBody]
		list := e.doJSON(t, "GET", "/api/admin/tenants?per_page=100", adminToken, nil)
		if list.Status != 200 || json.Unmarshal(list.Body, &page) != nil || len(page.Data) < 2 || page.Data[len(page.Data)-1].ID != bare.ID {
			t.Fatalf("%d %s", list.Status, list.Body)
		}
		assertBody(t, e.doJSON(t, "GET", "/api/admin/tenants/999999", adminToken, nil), 404, `{"message":"Not Found."}`)
		assertBody(t, e.doJSON(t, "GET", "/api/admin/tenants/x", adminToken, nil), 404, `{"message":"Not Found."}`)
	})

	t.Run("bad input is 422 with Laravel's messages and changes nothing", func(t *testing.T) {
		before := e.count(t, &models.Tenant{}, "1 = 1")
		cases := []struct {
			method, path string
			body         any
			want         string
		}{
			{"POST", "/api/admin/tenants", `{}`, `{"message":"The name field is required.","errors":{"name":["The name field is required."]}}`},
			{"POST", "/api/admin/tenants", map[string]any{"name": "Copy", "psp_account_id": "acct_acme"}, `{"message":"The psp account id has already been taken.","errors":{"psp_account_id":["The psp account id has already been taken."]}}`},
			{"POST", "/api/admin/tenants", map[string]any{"name": "X", "psp_account_id": "ba_1"}, `{"message":"The psp account id field must start with one of the following: acct_.","errors":{"psp_account_id":["The psp account id field must start with one of the following: acct_."]}}`},
			{"POST", "/api/admin/tenants", map[string]any{"name": "X", "allowed_hostnames": "shop.example"}, `{"message":"The allowed hostnames field must be an array.","errors":{"allowed_hostnames":["The allowed hostnames field must be an array."]}}`},
			{"POST", "/api/admin/tenants", map[string]any{"name": "X", "allowed_hostnames": []any{"ok.example", "not a host", 7}}, `{"message":"The allowed hostnames.1 field format is invalid. (and 1 more error)","errors":{"allowed_hostnames.1":["The allowed hostnames.1 field format is invalid."],"allowed_hostnames.2":["The allowed hostnames.2 field must be a string."]}}`},
			{"POST", "/api/admin/tenants", map[string]any{"name": "X", "redact_query_params": make([]string, 51)}, `{"message":"The redact query params field must not have more than 50 items.","errors":{"redact_query_params":["The redact query params field must not have more than 50 items."]}}`},
			{"PATCH", "/api/admin/tenants/" + acme.ID, `{"name":null}`, `{"message":"The name field is required.","errors":{"name":["The name field is required."]}}`},
		}
		for _, c := range cases {
			got := e.doJSON(t, c.method, c.path, adminToken, c.body)
			if got.Status != 422 || !strings.HasPrefix(string(got.Body), c.want) {
				t.Fatalf("%s %s %v: %d %s\nwant 422 %s", c.method, c.path, c.body, got.Status, got.Body, c.want)
			}
		}
		if n := e.count(t, &models.Tenant{}, "1 = 1"); n != before {
			t.Fatalf("%d tenants, want %d", n, before)
		}
		assertBody(t, e.doJSON(t, "GET", "/api/admin/tenants/"+acme.ID, adminToken, nil), 200, string(res.Body))
	})

	var token string
	t.Run("tokens: created with abilities and expiry, listed without secrets, revoked", func(t *testing.T) {
		expires := time.Now().Add(48 * time.Hour).UTC().Truncate(time.Second)
		res := e.doJSON(t, "POST", "/api/admin/tenants/"+acme.ID+"/tokens", adminToken, map[string]any{"name": "site", "abilities": []string{"members:read", "products:read"}, "expires_at": expires.Format(time.RFC3339)})
		re := regexp.MustCompile(`^\{"data":\{"id":"([1-9][0-9]*)","token":"([1-9][0-9]*\|[A-Za-z0-9]{40,48})","name":"site","abilities":\["members:read","products:read"\],"expires_at":"` + regexp.QuoteMeta(models.FormatTime(expires)) + `"\}\}$`)
		m := re.FindStringSubmatch(string(res.Body))
		if res.Status != 201 || m == nil {
			t.Fatalf("create token: %d %s", res.Status, res.Body)
		}
		token = m[2]
		if res := e.doJSON(t, "GET", "/api/platform/members", token, nil); res.Status != 200 {
			t.Fatalf("the new token: %d %s", res.Status, res.Body)
		}
		assertBody(t, e.doJSON(t, "POST", "/api/platform/members", token, map[string]any{"email": "a@example.com"}), 403, `{"message":"Invalid ability provided."}`)
		var dflt struct {
			Abilities []string `json:"abilities"`
			Name      string   `json:"name"`
			ExpiresAt *string  `json:"expires_at"`
		}
		mustData(t, e.doJSON(t, "POST", "/api/admin/tenants/"+acme.ID+"/tokens", adminToken, `{}`), 201, &dflt)
		if len(dflt.Abilities) != 1 || dflt.Abilities[0] != "*" || dflt.ExpiresAt != nil {
			t.Fatalf("defaults: %+v", dflt)
		}
		list := e.doJSON(t, "GET", "/api/admin/tenants/"+acme.ID+"/tokens", adminToken, nil)
		if list.Status != 200 || strings.Contains(string(list.Body), strings.SplitN(token, "|", 2)[1]) || strings.Contains(string(list.Body), `"token"`) ||
			!regexp.MustCompile(`^\{"data":\[\{"id":"`+m[1]+`","name":"site","abilities":\["members:read","products:read"\],"last_used_at":(null|"[^"]+"),"expires_at":"[^"]+","created_at":"[^"]+"\},\{`).Match(list.Body) {
			t.Fatalf("list: %d %s", list.Status, list.Body)
		}
		for _, c := range []struct{ body, want string }{
			{`{"abilities":["events:read","root"]}`, `{"message":"The selected abilities.1 is invalid.","errors":{"abilities.1":["The selected abilities.1 is invalid."]}}`},
			{`{"expires_at":"2020-01-01T00:00:00Z"}`, `{"message":"The expires at field must be a date after now.","errors":{"expires_at":["The expires at field must be a date after now."]}}`},
			{`{"expires_at":"tomorrow"}`, `{"message":"The expires at field must be a valid date. (and 1 more error)","errors":{"expires_at":["The expires at field must be a valid date.","The expires at field must be a date after now."]}}`},
		} {
			assertBody(t, e.doJSON(t, "POST", "/api/admin/tenants/"+acme.ID+"/tokens", adminToken, c.body), 422, c.want)
		}
		assertBody(t, e.doJSON(t, "POST", "/api/admin/tenants/999999/tokens", adminToken, `{}`), 404, `{"message":"Not Found."}`)
		if n := e.count(t, &models.PersonalAccessToken{}, "tokenable_id = ?", acme.ID); n != 2 {
			t.Fatalf("%d tokens after refused creates, want 2", n)
		}

		// Revoked: refused within 4 s on every process, b having cached it.
		if res := b.doJSON(t, "GET", "/api/platform/members", token, nil); res.Status != 200 {
			t.Fatalf("%d", res.Status)
		}
		id := strings.SplitN(token, "|", 2)[0]
		revoked := time.Now()
		if res := e.doJSON(t, "DELETE", "/api/admin/tokens/"+id, adminToken, nil); res.Status != 204 || len(res.Body) != 0 {
			t.Fatalf("revoke: %d %s", res.Status, res.Body)
		}
		testenv.Within(t, revoked, 4*time.Second, 6*time.Second, "b refuses the revoked token", func() bool {
			return b.doJSON(t, "GET", "/api/platform/members", token, nil).Status == 401
		})
		assertBody(t, e.doJSON(t, "DELETE", "/api/admin/tokens/"+id, adminToken, nil), 404, `{"message":"Not Found."}`)
	})

	t.Run("features: switched, seen by another process within a second; others are 404", func(t *testing.T) {
		tok := e.doJSON(t, "POST", "/api/admin/tenants/"+acme.ID+"/tokens", adminToken, `{}`)
		var created struct {
			Token string `json:"token"`
		}
		mustData(t, tok, 201, &created)
		tn := testenv.Tenant{Token: created.Token}
		tn.ID, _ = models.ParseID(acme.ID)
		assertBody(t, b.doJSON(t, "GET", "/api/platform/events", tn.Token, nil), 200, `{"data":{"count":0,"events":[]}}`)
		for _, name := range []string{"UseQueueEvents", "AnonymizeIp"} {
			res := e.doJSON(t, "PUT", "/api/admin/tenants/"+acme.ID+"/features/"+name, adminToken, map[string]any{"active": true})
			assertBody(t, res, 200, fmt.Sprintf(`{"data":{"feature":"%s","tenant_id":"%s","active":true}}`, name, acme.ID))
		}
		on := time.Now()
		var got tenantBody
		mustData(t, e.doJSON(t, "GET", "/api/admin/tenants/"+acme.ID, adminToken, nil), 200, &got)
		if !got.Features.UseQueueEvents || !got.Features.AnonymizeIp {
			t.Fatalf("%+v", got.Features)
		}
		// b, which has read the flag off, queues the tenant's events once it sees it on.
		testenv.Within(t, on, time.Second, 3*time.Second, "b queues the tenant's events", func() bool {
			if res := b.doJSON(t, "POST", "/api/platform/track", tn.Token, map[string]any{"events": []any{pageView("s-1", 1)}}); res.Status != 202 {
				t.Fatalf("track: %d %s", res.Status, res.Body)
			}
			return b.QueueLen(t, tn) > 0
		})
		assertBody(t, e.doJSON(t, "PUT", "/api/admin/tenants/"+acme.ID+"/features/Nope", adminToken, map[string]any{"active": true}), 404, `{"message":"Not Found."}`)
		assertBody(t, e.doJSON(t, "PUT", "/api/admin/tenants/999999/features/AnonymizeIp", adminToken, map[string]any{"active": true}), 404, `{"message":"Not Found."}`)
		assertBody(t, e.doJSON(t, "PUT", "/api/admin/tenants/"+acme.ID+"/features/AnonymizeIp", adminToken, `{}`), 422, `{"message":"The active field is required.","errors":{"active":["The active field is required."]}}`)
		assertBody(t, e.doJSON(t, "PUT", "/api/admin/tenants/"+acme.ID+"/features/AnonymizeIp", adminToken, `{"active":"on"}`), 422, `{"message":"The active field must be true or false.","errors":{"active":["The active field must be true or false."]}}`)
		mustData(t, e.doJSON(t, "GET", "/api/admin/tenants/"+acme.ID, adminToken, nil), 200, &got)
		if !got.Features.AnonymizeIp {
			t.Fatal("a refused switch turned AnonymizeIp off")
		}
	})

	t.Run("a rotated site key is refused by every process within a second", func(t *testing.T) {
		track := func(e *apiEnv, key string) int {
			body, _ := json.Marshal(map[string]any{"site_key": key, "events": []any{map[string]any{"type": "page_view", "session_id": "s", "url": "https://shop.example/", "event_sequence": 1}}})
			return e.Do(t, "POST", "/api/track", "", body, "Content-Type", "application/json").Status
		}
		if track(b, acme.SiteKey) != 202 {
			t.Fatal("the site key before rotation")
		}
		var rotated tenantBody
		mustData(t, e.doJSON(t, "POST", "/api/admin/tenants/"+acme.ID+"/site-key", adminToken, nil), 200, &rotated)
		at := time.Now()
		if rotated.SiteKey == acme.SiteKey || rotated.ID != acme.ID || !strings.HasPrefix(rotated.SiteKey, "site_") {
			t.Fatalf("%+v", rotated)
		}
		testenv.Within(t, at, time.Second, 3*time.Second, "b refuses the old site key", func() bool { return track(b, acme.SiteKey) == 401 })
		if track(b, rotated.SiteKey) != 202 {
			t.Fatal("the new site key is refused")
		}
	})

	t.Run("PATCH: lists replaced or cleared with null; an account freed can be taken", func(t *testing.T) {
		var got tenantBody
		mustData(t, e.doJSON(t, "PATCH", "/api/admin/tenants/"+acme.ID, adminToken, `{"allowed_hostnames":null,"psp_account_id":null,"name":"Acme 2"}`), 200, &got)
		if got.Name != "Acme 2" || got.PSPAccountID != nil || len(got.AllowedHostnames) != 0 || len(got.RedactQueryParams) != 2 {
			t.Fatalf("%+v", got)
		}
		var other tenantBody
		mustData(t, e.doJSON(t, "POST", "/api/admin/tenants", adminToken, map[string]any{"name": "Next", "psp_account_id": "acct_acme"}), 201, &other)
		assertBody(t, e.doJSON(t, "PATCH", "/api/admin/tenants/"+acme.ID, adminToken, map[string]any{"psp_account_id": "acct_acme"}), 422,
			`{"message":"The psp account id has already been taken.","errors":{"psp_account_id":["The psp account id has already been taken."]}}`)
	})
}

// allowed_hostnames restricts the pages POST /api/track takes events of (subdomains
// included); a refusal stores nothing of the request, and the token's route is not restricted.
func TestTrackAcceptsOnlyAllowedHostnames(t *testing.T) {
	e := startAPI(t, "ADMIN_API_TOKENS="+adminToken)
	tn := testenv.MustTenant(t, e.DB, true)
	var got tenantBody
	mustData(t, e.doJSON(t, "PATCH", fmt.Sprintf("/api/admin/tenants/%d", tn.ID), adminToken, map[string]any{"allowed_hostnames": []string{"shop.example"}}), 200, &got)
	page := func(u string) map[string]any {
		return map[string]any{"type": "page_view", "session_id": "s", "url": u, "event_sequence": 1}
	}
	post := func(events ...map[string]any) response {
		body, _ := json.Marshal(map[string]any{"site_key": tn.SiteKey, "events": events})
		return e.Do(t, "POST", "/api/track", "", body, "Content-Type", "application/json")
	}
	testenv.Eventually(t, 3*time.Second, "the list is in force", func() bool {
		return post(page("https://elsewhere.example/")).Status == 422
	})
	before := e.EventRows(t, tn)
	assertBody(t, post(page("https://shop.example/a"), page("https://evil.example/?shop.example"), page("https://notshop.example/"), page("https://shop.example.evil.example/")), 422,
		`{"message":"The events.1.url field must be a page of an allowed hostname. (and 2 more errors)","errors":{"events.1.url":["The events.1.url field must be a page of an allowed hostname."],"events.2.url":["The events.2.url field must be a page of an allowed hostname."],"events.3.url":["The events.3.url field must be a page of an allowed hostname."]}}`)
	if n := e.EventRows(t, tn); n != before || e.QueueLen(t, tn) != 0 {
		t.Fatalf("a refused request stored %d events, queued %d", n-before, e.QueueLen(t, tn))
	}
	for _, u := range []string{"https://shop.example/a", "http://SHOP.example:8080/b", "https://www.shop.example/c", "https://a.b.shop.example./d"} {
		if res := post(page(u)); res.Status != 202 {
			t.Fatalf("%s: %d %s", u, res.Status, res.Body)
		}
	}
	res := e.doJSON(t, "POST", "/api/platform/track", tn.Token, map[string]any{"events": []any{page("https://elsewhere.example/")}})
	if res.Status != 202 {
		t.Fatalf("platform track: %d %s", res.Status, res.Body)
	}
	if n := e.EventRows(t, tn); n != before+5 {
		t.Fatalf("%d events stored, want %d", n, before+5)
	}
}
