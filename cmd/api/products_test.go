package main

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eventq/eventq/internal/payments"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/models"
)

func TestProductsOverHTTP(t *testing.T) {
	e, _ := startCheckoutAPI(t)
	s := mustShop(t, e, false)
	other := testenv.MustTenant(t, e.DB, false)

	res := e.doJSON(t, "POST", "/api/platform/products", s.Token, map[string]any{"name": "Masterclass", "amount": 4900, "currency": "eur"})
	if !regexp.MustCompile(`^\{"data":\{"id":"[1-9][0-9]*","name":"Masterclass","amount":4900,"currency":"eur","active":true,"created_at":"[^"]+\+00:00"\}\}$`).Match(res.Body) || res.Status != 201 {
		t.Fatalf("create: %d %s", res.Status, res.Body)
	}
	var p productBody
	mustData(t, res, 201, &p)

	t.Run("what the fixture (the CLI's way) made shows here", func(t *testing.T) {
		var got productBody
		mustData(t, e.doJSON(t, "GET", fmt.Sprintf("/api/platform/products/%d", s.Product.ID), s.Token, nil), 200, &got)
		if got.Name != "Course" || got.Amount != 1999 || got.Currency != "usd" || !got.Active {
			t.Fatalf("%+v", got)
		}
		assertBody(t, e.doJSON(t, "GET", "/api/platform/products/"+p.ID, other.Token, nil), 404, `{"message":"Not Found."}`)
	})

	t.Run("bad input is 422 with Laravel's messages and stores nothing", func(t *testing.T) {
		before := e.rows(t, &models.Product{}, s.ID)
		cases := []struct {
			method, path string
			body         any
			want         string
		}{
			{"POST", "/api/platform/products", `{}`, `{"message":"The name field is required. (and 2 more errors)","errors":{"name":["The name field is required."],"amount":["The amount field is required."],"currency":["The currency field is required."]}}`},
			{"POST", "/api/platform/products", map[string]any{"name": "X", "amount": -1, "currency": "usd"}, `{"message":"The amount field must be at least 0.","errors":{"amount":["The amount field must be at least 0."]}}`},
			{"POST", "/api/platform/products", map[string]any{"name": "X", "amount": 100000000, "currency": "usd"}, `{"message":"The amount field must not be greater than 99999999.","errors":{"amount":["The amount field must not be greater than 99999999."]}}`},
			{"POST", "/api/platform/products", map[string]any{"name": "X", "amount": 1.5, "currency": "usd"}, `{"message":"The amount field must be an integer.","errors":{"amount":["The amount field must be an integer."]}}`},
			{"POST", "/api/platform/products", map[string]any{"name": "X", "amount": 1, "currency": "us"}, `{"message":"The currency field must be 3 characters. (and 1 more error)","errors":{"currency":["The currency field must be 3 characters.","The currency field format is invalid."]}}`},
			{"POST", "/api/platform/products", map[string]any{"name": "X", "amount": 1, "currency": "USD"}, `{"message":"The currency field format is invalid.","errors":{"currency":["The currency field format is invalid."]}}`},
			{"POST", "/api/platform/products", map[string]any{"name": strings.Repeat("n", 256), "amount": 1, "currency": "usd"}, `{"message":"The name field must not be greater than 255 characters.","errors":{"name":["The name field must not be greater than 255 characters."]}}`},
			{"PATCH", "/api/platform/products/" + p.ID, map[string]any{"amount": 1, "currency": "usd"}, `{"message":"The amount field is prohibited. (and 1 more error)","errors":{"amount":["The amount field is prohibited."],"currency":["The currency field is prohibited."]}}`},
			{"PATCH", "/api/platform/products/" + p.ID, map[string]any{"active": "yes"}, `{"message":"The active field must be true or false.","errors":{"active":["The active field must be true or false."]}}`},
			{"PATCH", "/api/platform/products/" + p.ID, `{"name":null}`, `{"message":"The name field is required.","errors":{"name":["The name field is required."]}}`},
			{"GET", "/api/platform/products?active=maybe", nil, `{"message":"The active field must be true or false.","errors":{"active":["The active field must be true or false."]}}`},
		}
		for _, c := range cases {
			assertBody(t, e.doJSON(t, c.method, c.path, s.Token, c.body), 422, c.want)
		}
		if n := e.rows(t, &models.Product{}, s.ID); n != before {
			t.Fatalf("%d products, want %d", n, before)
		}
		var got productBody
		mustData(t, e.doJSON(t, "GET", "/api/platform/products/"+p.ID, s.Token, nil), 200, &got)
		if got != p {
			t.Fatalf("a refused PATCH changed the product: %+v, was %+v", got, p)
		}
	})

	t.Run("withdrawn with active:false: listed as such and refused at checkout", func(t *testing.T) {
		var got productBody
		mustData(t, e.doJSON(t, "PATCH", "/api/platform/products/"+p.ID, s.Token, map[string]any{"active": false, "name": "Masterclass 2025", "amount": nil}), 200, &got)
		if got.Active || got.Name != "Masterclass 2025" || got.Amount != 4900 {
			t.Fatalf("%+v", got)
		}
		for q, want := range map[string][]string{"": {models.FormatID(s.Product.ID), p.ID}, "?active=true": {models.FormatID(s.Product.ID)}, "?active=0": {p.ID}} {
			var page listPage[productBody]
			res := e.doJSON(t, "GET", "/api/platform/products"+q, s.Token, nil)
			if res.Status != 200 || json.Unmarshal(res.Body, &page) != nil || len(page.Data) != len(want) {
				t.Fatalf("list %q: %d %s", q, res.Status, res.Body)
			}
			for i := range want {
				if page.Data[i].ID != want[i] {
					t.Fatalf("list %q: %s, want %v", q, res.Body, want)
				}
			}
		}
		body := checkoutBody(s)
		body["product_id"] = p.ID
		assertBody(t, e.PostCheckout(t, s.Token, body), 422, `{"message":"The selected product id is invalid.","errors":{"product_id":["The selected product id is invalid."]}}`)
		mustData(t, e.doJSON(t, "PATCH", "/api/platform/products/"+p.ID, s.Token, map[string]any{"active": true}), 200, &got)
		if res := e.PostCheckout(t, s.Token, body); res.Status != 201 {
			t.Fatalf("checkout after putting it back on sale: %d %s", res.Status, res.Body)
		}
	})

	t.Run("abilities: products:read reads, products:write writes", func(t *testing.T) {
		reader := testenv.MustTenant(t, e.DB, false, "products:read")
		assertBody(t, e.doJSON(t, "POST", "/api/platform/products", reader.Token, map[string]any{"name": "X", "amount": 1, "currency": "usd"}), 403, `{"message":"Invalid ability provided."}`)
		members := testenv.MustTenant(t, e.DB, false, "members:read", "members:write")
		assertBody(t, e.doJSON(t, "GET", "/api/platform/products", members.Token, nil), 403, `{"message":"Invalid ability provided."}`)
		if res := e.doJSON(t, "GET", "/api/platform/products", reader.Token, nil); res.Status != 200 {
			t.Fatalf("%d %s", res.Status, res.Body)
		}
	})
}

// A member's entitlements and purchases over HTTP, and the 1 s promise: a grant made on one api
// process (the return page fulfils) and a revocation (as a refund's job writes it) are seen by
// the check on another process within a second, whatever either caches.
func TestEntitlementsAcrossTwoAPIProcesses(t *testing.T) {
	fake := testenv.StartFakePSP(t)
	env := []string{"PSP_API_BASE=" + fake.URL, "PSP_SECRET_KEY=sk_test_x", "APP_URL=" + checkoutAppURL}
	a := startAPI(t, env...)
	b := startAPIOn(t, a.Redis, a.DB, a.DBURL, env...)
	s := mustShop(t, a, false)
	member, product := models.FormatID(s.Member.ID), models.FormatID(s.Product.ID)
	check := "/api/platform/members/" + member + "/entitlements/" + product

	// Both processes have answered (and may cache) "no entitlement".
	for _, e := range []*apiEnv{a, b} {
		assertBody(t, e.doJSON(t, "GET", check, s.Token, nil), 404, `{"message":"Not Found."}`)
		assertBody(t, e.doJSON(t, "GET", "/api/platform/members/"+member+"/entitlements", s.Token, nil), 200, `{"data":[]}`)
	}
	cs := a.MustCheckout(t, s)
	fake.Pay(cs)
	granted := time.Now()
	if res := a.ReturnJSON(t, s.ID, cs); res.Status != 200 || !strings.Contains(string(res.Body), `"fulfilled"`) {
		t.Fatalf("return page: %d %s", res.Status, res.Body)
	}
	waitStatus(t, b, check, s.Token, 200, granted)
	p := a.assertFulfilledOnce(t, s, cs)
	var ent models.Entitlement
	testenv.Must(t, a.DB.Where("purchase_id = ?", p.ID).Take(&ent).Error)
	want := fmt.Sprintf(`{"data":{"id":"%d","product_id":"%s","purchase_id":"%d","granted_at":"%s"}}`, ent.ID, product, p.ID, models.FormatTime(ent.CreatedAt))
	assertBody(t, b.doJSON(t, "GET", check, s.Token, nil), 200, want)
	assertBody(t, b.doJSON(t, "GET", "/api/platform/members/"+member+"/entitlements", s.Token, nil), 200, "{\"data\":["+strings.TrimSuffix(strings.TrimPrefix(want, `{"data":`), "}")+"]}")
	assertBody(t, a.doJSON(t, "GET", "/api/platform/members/"+member+"/purchases", s.Token, nil), 200,
		fmt.Sprintf(`{"data":[{"id":"%d","audience_member_id":"%s","product_id":"%s","amount_total":1999,"currency":"usd","status":"paid","created_at":"%s"}]}`,
			p.ID, member, product, models.FormatTime(p.CreatedAt)))

	// A refund, handled as the worker's job handles it (a third process's work: neither api
	// writes it), ends the entitlement; both processes had answered 200 and may cache it.
	assertBody(t, a.doJSON(t, "GET", check, s.Token, nil), 200, want)
	_, refund := fake.Refund(s.Account, *paidIntent(t, fake, cs), 1999, 1999)
	if out, err := a.Main.App.Payments.HandleEvent(context.Background(), refund); err != nil || out != payments.RevokeApplied {
		t.Fatalf("refund: %q %v", out, err)
	}
	revoked := time.Now()
	waitStatus(t, b, check, s.Token, 404, revoked)
	waitStatus(t, a, check, s.Token, 404, revoked)
	assertBody(t, b.doJSON(t, "GET", "/api/platform/members/"+member+"/entitlements", s.Token, nil), 200, `{"data":[]}`)

	t.Run("a second purchase, checked by the external id another process gave the member", func(t *testing.T) {
		byExternal := "/api/platform/members/external:site-user-7/entitlements/" + product
		assertBody(t, b.doJSON(t, "GET", byExternal, s.Token, nil), 404, `{"message":"Not Found."}`) // no such member yet
		var m memberBody
		mustData(t, a.doJSON(t, "PATCH", "/api/platform/members/"+member, s.Token, map[string]any{"external_id": "site-user-7"}), 200, &m)
		cs2 := a.MustCheckout(t, s)
		fake.Pay(cs2)
		if res := a.ReturnJSON(t, s.ID, cs2); res.Status != 200 {
			t.Fatalf("return page: %d %s", res.Status, res.Body)
		}
		waitStatus(t, b, byExternal, s.Token, 200, time.Now())
		// b now holds external:site-user-7 as this member; another process gives the member a
		// new external id, and the old one names no one on b within a second.
		mustData(t, a.doJSON(t, "PATCH", "/api/platform/members/"+member, s.Token, map[string]any{"external_id": "site-user-8"}), 200, &m)
		waitStatus(t, b, byExternal, s.Token, 404, time.Now())
		waitStatus(t, b, "/api/platform/members/external:site-user-8/entitlements/"+product, s.Token, 200, time.Now())
		assertBody(t, b.doJSON(t, "GET", "/api/platform/members/"+member+"/entitlements/999999", s.Token, nil), 404, `{"message":"Not Found."}`)
		assertBody(t, b.doJSON(t, "GET", "/api/platform/members/999999/entitlements/"+product, s.Token, nil), 404, `{"message":"Not Found."}`)
		other := testenv.MustTenant(t, a.DB, false)
		assertBody(t, b.doJSON(t, "GET", check, other.Token, nil), 404, `{"message":"Not Found."}`)
	})
}

// paidIntent is the payment intent of paid session cs.
func paidIntent(t *testing.T, fake *testenv.FakePSP, cs string) *string {
	t.Helper()
	sess, _, ok := fake.Session(cs)
	if !ok || sess.PaymentIntent == nil {
		t.Fatalf("session %s has no payment intent", cs)
	}
	return sess.PaymentIntent
}

// waitStatus polls path on e until it answers status, and fails unless that happened within a
// second of since.
func waitStatus(t *testing.T, e *apiEnv, path, token string, status int, since time.Time) {
	t.Helper()
	testenv.Within(t, since, time.Second, 3*time.Second, fmt.Sprintf("%s answers %d", path, status), func() bool {
		return e.doJSON(t, "GET", path, token, nil).Status == status
	})
}

// Many members checked in turn over kept-alive connections each get their own answer: the
// cached member references are not the request buffers Fiber reuses (a reference kept as one
// turned into another member's as the buffer was overwritten).
func TestEntitlementChecksNeverMixMembersUp(t *testing.T) {
	e := startAPI(t)
	s := testenv.MustShop(t, e.DB, "", false)
	const n = 40
	ids := make([]uint64, n)
	for i := range ids {
		m := models.AudienceMember{TenantID: s.ID, Email: fmt.Sprintf("m%d@example.com", i)}
		testenv.Must(t, e.DB.Create(&m).Error)
		ids[i] = m.ID
		if i%2 == 0 { // even members bought the product
			p := models.Purchase{TenantID: s.ID, AudienceMemberID: m.ID, ProductID: s.Product.ID, PSPCheckoutSessionID: fmt.Sprintf("cs_mix_%d", i),
				AmountTotal: 1999, Currency: "usd", Status: models.PurchasePaid}
			testenv.Must(t, e.DB.Create(&p).Error)
			testenv.Must(t, e.DB.Create(&models.Entitlement{TenantID: s.ID, AudienceMemberID: m.ID, ProductID: s.Product.ID, PurchaseID: p.ID}).Error)
		}
	}
	testenv.Eventually(t, 3*time.Second, "the api follows the change feed", e.Main.App.Follower.Fresh)
	// The token read once first: a token lookup has a deadline (it must not wait on a database
	// that hangs), which eight first lookups at once on a loaded machine can pass.
	if res := e.doJSON(t, "GET", "/api/platform/products", s.Token, nil); res.Status != 200 {
		t.Fatalf("%d %s", res.Status, res.Body)
	}
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for k := 0; k < 150; k++ {
				i := (k*7 + w*13) % n
				ref := fmt.Sprint(ids[i])
				want := map[bool]int{true: 200, false: 404}[i%2 == 0]
				if k%3 == 0 {
					ref, want = "0"+ref, 404 // another spelling of the id: no id at all
				}
				res := e.doJSON(t, "GET", fmt.Sprintf("/api/platform/members/%s/entitlements/%d", ref, s.Product.ID), s.Token, nil)
				if res.Status != want {
					select {
					case errs <- fmt.Sprintf("member %d (%s): %d %s, want %d", ids[i], ref, res.Status, res.Body, want):
					default:
					}
					return
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for msg := range errs {
		t.Error(msg)
	}
}
