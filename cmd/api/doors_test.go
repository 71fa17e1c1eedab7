package main

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/eventq/eventq/internal/config"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/models"
)

// The small doors an outsider found: ids in other spellings, forged cursors, a session id the
// database cannot take, a token without abilities, a list that makes a huge 422. Each answers
// as the contract says, on SQLite and Postgres, and changes nothing.
func TestSmallDoorsAreShut(t *testing.T) {
	e := startAPI(t, "ADMIN_API_TOKENS="+adminToken)
	shop := testenv.MustShop(t, e.DB, "", true)
	id := models.FormatID
	member, product, tenant := id(shop.Member.ID), id(shop.Product.ID), id(shop.ID)
	tokenID, _, _ := strings.Cut(shop.Token, "|")
	notFound := `{"message":"Not Found."}`

	t.Run("an id in any form but its canonical one is 404", func(t *testing.T) {
		for _, bad := range []func(string) string{
			func(s string) string { return "0" + s },
			func(s string) string { return "00" + s },
			func(s string) string { return "+" + s },
			func(s string) string { return "%2B" + s },
			func(s string) string { return s + "%20" },
			func(string) string { return "9223372036854775808" },
			func(string) string { return "18446744073709551615" },
			func(string) string { return "18446744073709551616" },
			func(string) string { return "99999999999999999999999999" },
		} {
			for _, c := range []struct{ method, path, token string }{
				{"GET", "/api/platform/members/" + bad(member), shop.Token},
				{"GET", "/api/platform/members/" + bad(member) + "/entitlements", shop.Token},
				{"GET", "/api/platform/members/" + member + "/entitlements/" + bad(product), shop.Token},
				{"GET", "/api/platform/members/" + bad(member) + "/purchases", shop.Token},
				{"GET", "/api/platform/members/" + bad(member) + "/data", shop.Token},
				{"PATCH", "/api/platform/members/" + bad(member), shop.Token},
				{"DELETE", "/api/platform/members/" + bad(member), shop.Token},
				{"GET", "/api/platform/products/" + bad(product), shop.Token},
				{"PATCH", "/api/platform/products/" + bad(product), shop.Token},
				{"GET", "/api/platform/erasures/" + bad("1"), shop.Token},
				{"GET", "/api/admin/tenants/" + bad(tenant), adminToken},
				{"PATCH", "/api/admin/tenants/" + bad(tenant), adminToken},
				{"GET", "/api/admin/tenants/" + bad(tenant) + "/tokens", adminToken},
				{"POST", "/api/admin/tenants/" + bad(tenant) + "/site-key", adminToken},
				{"DELETE", "/api/admin/tokens/" + bad(tokenID), adminToken},
			} {
				res := e.Do(t, c.method, c.path, c.token, []byte(`{"name":"Eve"}`), "Content-Type", "application/json")
				if res.Status != 404 || string(res.Body) != notFound {
					t.Fatalf("%s %s: %d %s", c.method, c.path, res.Status, res.Body)
				}
			}
		}
		var m models.AudienceMember
		testenv.Must(t, e.DB.Take(&m, shop.Member.ID).Error)
		if m.Name != "Ada" || m.ErasedAt != nil {
			t.Fatalf("the member changed: %+v", m)
		}
		if res := e.Do(t, "GET", "/api/platform/events", shop.Token, nil); res.Status != 200 {
			t.Fatalf("DELETE /api/admin/tokens/0%s revoked the token: %d", tokenID, res.Status)
		}
	})

	t.Run("an external id no member can have is 404, a filter by one an empty list", func(t *testing.T) {
		for _, ref := range []string{"external:%00", "external:%FF", "external:a%00b", "external:%C3%28", "external:" + strings.Repeat("x", 192)} {
			for _, path := range []string{"/api/platform/members/" + ref, "/api/platform/members/" + ref + "/entitlements", "/api/platform/members/" + ref + "/data"} {
				if res := e.Do(t, "GET", path, shop.Token, nil); res.Status != 404 || string(res.Body) != notFound {
					t.Fatalf("GET %s: %d %s", path, res.Status, res.Body)
				}
			}
			if res := e.Do(t, "DELETE", "/api/platform/members/"+ref, shop.Token, nil); res.Status != 404 {
				t.Fatalf("DELETE %s: %d %s", ref, res.Status, res.Body)
			}
		}
		for _, q := range []string{"external_id=%00", "external_id=%FF%FE", "email=a%00b", "email=%C3%28"} {
			res := e.Do(t, "GET", "/api/platform/members?"+q, shop.Token, nil)
			if res.Status != 200 || !strings.HasPrefix(string(res.Body), `{"data":[],`) {
				t.Fatalf("GET /api/platform/members?%s: %d %s", q, res.Status, res.Body)
			}
		}
	})

	t.Run("a cursor the service did not issue is the first page", func(t *testing.T) {
		first := e.Do(t, "GET", "/api/platform/members", shop.Token, nil)
		if first.Status != 200 {
			t.Fatalf("%d %s", first.Status, first.Body)
		}
		for _, raw := range []string{
			`{"id":9223372036854775808,"_pointsToNextItems":true}`,
			`{"id":18446744073709551616,"_pointsToNextItems":false}`,
			`{"id":-5,"_pointsToNextItems":true}`,
			`{"id":"1e400","_pointsToNextItems":true}`,
			`{"id":1}`,
			"\x00\xff",
		} {
			for _, cursor := range []string{base64.RawURLEncoding.EncodeToString([]byte(raw)), "%FF%00", "not*base64"} {
				for _, path := range []string{"/api/platform/members?cursor=", "/api/platform/products?cursor=", "/api/admin/tenants?cursor="} {
					token := shop.Token
					if strings.HasPrefix(path, "/api/admin") {
						token = adminToken
					}
					res := e.Do(t, "GET", path+cursor, token, nil)
					if res.Status != 200 {
						t.Fatalf("%s%s: %d %s", path, cursor, res.Status, res.Body)
					}
					if path == "/api/platform/members?cursor=" && !strings.Contains(string(res.Body), `"id":"`+member+`"`) {
						t.Fatalf("%s%s is not the first page: %s", path, cursor, res.Body)
					}
				}
			}
		}
	})

	t.Run("a session id the database cannot hold is 404", func(t *testing.T) {
		for _, sid := range []string{"%FF", "%00", "cs_%00x", "cs_%C3%28", "cs_%E2%80%8B", strings.Repeat("c", 300)} {
			res := e.Do(t, "GET", "/checkout/return?tenant="+tenant+"&session_id="+sid, "", nil, "Accept", "application/json")
			if res.Status != 404 || string(res.Body) != notFound {
				t.Fatalf("session_id=%.20s: %d %s", sid, res.Status, res.Body)
			}
		}
	})

	t.Run("a token with empty or null abilities is 422, never every ability", func(t *testing.T) {
		var before int64
		testenv.Must(t, e.DB.Model(&models.PersonalAccessToken{}).Count(&before).Error)
		for _, body := range []string{`{"abilities":[]}`, `{"abilities":null}`} {
			res := e.Do(t, "POST", "/api/admin/tenants/"+tenant+"/tokens", adminToken, []byte(body), "Content-Type", "application/json")
			assertBody(t, res, 422, `{"message":"The abilities field is required.","errors":{"abilities":["The abilities field is required."]}}`)
		}
		var after int64
		testenv.Must(t, e.DB.Model(&models.PersonalAccessToken{}).Count(&after).Error)
		if after != before {
			t.Fatalf("%d tokens made", after-before)
		}
	})

	t.Run("a list past its limit is one message, whatever its length", func(t *testing.T) {
		items := func(n int, item string) string { return strings.TrimSuffix(strings.Repeat(item+",", n), ",") }
		for _, c := range []struct{ method, path, token, body, field string }{
			{"POST", "/api/admin/tenants", adminToken, `{"name":"x","allowed_hostnames":[` + items(20000, `"a.example"`) + `]}`, "allowed_hostnames"},
			{"PATCH", "/api/admin/tenants/" + tenant, adminToken, `{"redact_query_params":[` + items(20000, `"x"`) + `]}`, "redact_query_params"},
			{"POST", "/api/admin/tenants/" + tenant + "/tokens", adminToken, `{"abilities":[` + items(20000, `"nope"`) + `]}`, "abilities"},
			{"POST", "/api/platform/events/acks", shop.Token, `{"acks":[` + items(20000, `"x"`) + `]}`, "acks"},
			{"POST", "/api/platform/track", shop.Token, `{"events":[` + items(2000, `{}`) + `]}`, "events"},
		} {
			res := e.Do(t, c.method, c.path, c.token, []byte(c.body), "Content-Type", "application/json")
			if res.Status != 422 || len(res.Body) > 300 || !strings.Contains(string(res.Body), `"errors":{"`+c.field+`":["The `) {
				t.Fatalf("%s %s: %d, %d bytes: %.300s", c.method, c.path, res.Status, len(res.Body), res.Body)
			}
		}
	})
}

// An operator token shorter than 32 characters stops the api at start, naming the variable
// and not the token.
func TestAShortOperatorTokenStopsTheAPI(t *testing.T) {
	_, err := config.Load([]string{"ADMIN_API_TOKENS=" + adminToken + ",tooshort"})
	if err == nil || !strings.Contains(err.Error(), "ADMIN_API_TOKENS") || strings.Contains(err.Error(), "tooshort") {
		t.Fatalf("config.Load: %v", err)
	}
}
