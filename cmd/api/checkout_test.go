package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eventq/eventq/internal/psp"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/models"
)

const checkoutAppURL = "http://127.0.0.1:9999"

// startCheckoutAPI runs the api against a fake provider.
func startCheckoutAPI(t *testing.T) (*apiEnv, *testenv.FakePSP) {
	t.Helper()
	fake := testenv.StartFakePSP(t)
	e := startAPI(t, "PSP_API_BASE="+fake.URL, "PSP_SECRET_KEY=sk_test_x", "APP_URL="+checkoutAppURL)
	return e, fake
}

// shop is a tenant with (usually) a connected account, one audience member and one product.
type shop struct {
	tenant
	Account string
	Member  models.AudienceMember
	Product models.Product
}

// MustShop creates a tenant (UseQueueEvents = flag, token abilities as MustTenant) with a
// connected account, a member and a 19.99 USD product.
func (e *apiEnv) MustShop(flag bool, abilities ...string) shop {
	e.t.Helper()
	return e.mustShopOn(true, flag, abilities...)
}

// mustShopOn is MustShop; connected false leaves the tenant without a connected account.
func (e *apiEnv) mustShopOn(connected, flag bool, abilities ...string) shop {
	e.t.Helper()
	tn := e.MustTenant(flag, abilities...)
	s := shop{tenant: tn}
	if connected {
		s.Account = fmt.Sprintf("acct_test_%d", tn.ID)
		if err := e.DB.Model(&models.Tenant{}).Where("id = ?", tn.ID).Update("psp_account_id", s.Account).Error; err != nil {
			e.t.Fatalf("set connected account: %v", err)
		}
		s.PSPAccountID = &s.Account
	}
	s.Member = models.AudienceMember{TenantID: tn.ID, Email: fmt.Sprintf("member%d@example.com", tn.ID), Name: "Ada"}
	if err := e.DB.Create(&s.Member).Error; err != nil {
		e.t.Fatalf("create member: %v", err)
	}
	s.Product = models.Product{TenantID: tn.ID, Name: "Course", Amount: 1999, Currency: "usd"}
	if err := e.DB.Create(&s.Product).Error; err != nil {
		e.t.Fatalf("create product: %v", err)
	}
	return s
}

type checkoutCreated struct {
	Data struct {
		ID  string `json:"id"`
		URL string `json:"url"`
	} `json:"data"`
}

// PostCheckout posts body to the checkout endpoint with tn's token.
func (e *apiEnv) PostCheckout(token string, body any) response {
	e.t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		e.t.Fatal(err)
	}
	return e.Do("POST", "/api/platform/checkout/sessions", token, b, "Content-Type", "application/json", "Accept", "application/json")
}

// MustCheckout creates a checkout session for s's member and product and returns its id.
func (e *apiEnv) MustCheckout(s shop) string {
	e.t.Helper()
	res := e.PostCheckout(s.Token, checkoutBody(s))
	if res.Status != 201 {
		e.t.Fatalf("POST checkout: %d %s", res.Status, res.Body)
	}
	var out checkoutCreated
	if err := json.Unmarshal(res.Body, &out); err != nil || !strings.HasPrefix(out.Data.ID, "cs_") {
		e.t.Fatalf("bad 201 body %s", res.Body)
	}
	return out.Data.ID
}

func checkoutBody(s shop) map[string]any {
	return map[string]any{
		"audience_member_id": models.FormatID(s.Member.ID), "product_id": models.FormatID(s.Product.ID),
		"cancel_url": "https://shop.example/cancel",
	}
}

func returnPath(tenantID uint64, session string) string {
	return fmt.Sprintf("/checkout/return?tenant=%d&session_id=%s", tenantID, url.QueryEscape(session))
}

// ReturnJSON GETs the return page as JSON.
func (e *apiEnv) ReturnJSON(tenantID uint64, session string) response {
	e.t.Helper()
	return e.Do("GET", returnPath(tenantID, session), "", nil, "Accept", "application/json")
}

func returnBody(status string, purchaseID uint64) string {
	if purchaseID == 0 {
		return fmt.Sprintf(`{"data":{"status":%q,"purchase_id":null}}`, status)
	}
	return fmt.Sprintf(`{"data":{"status":%q,"purchase_id":"%d"}}`, status, purchaseID)
}

// rows counts rows of model for the tenant.
func (e *apiEnv) rows(t *testing.T, model any, tenantID uint64) int64 {
	t.Helper()
	var n int64
	if err := e.DB.Model(model).Where("tenant_id = ?", tenantID).Count(&n).Error; err != nil {
		t.Fatal(err)
	}
	return n
}

// assertFulfilledOnce checks s has exactly one purchase of session, one entitlement and one
// purchase_completed event, and returns the purchase.
func (e *apiEnv) assertFulfilledOnce(t *testing.T, s shop, session string) models.Purchase {
	t.Helper()
	var ps []models.Purchase
	if err := e.DB.Where("tenant_id = ?", s.ID).Find(&ps).Error; err != nil {
		t.Fatal(err)
	}
	if len(ps) != 1 {
		t.Fatalf("%d purchases, want 1", len(ps))
	}
	p := ps[0]
	if p.PSPCheckoutSessionID != session || p.AmountTotal != 1999 || p.Currency != "usd" ||
		p.AudienceMemberID != s.Member.ID || p.ProductID != s.Product.ID {
		t.Fatalf("unexpected purchase %+v", p)
	}
	var ents []models.Entitlement
	if err := e.DB.Where("tenant_id = ?", s.ID).Find(&ents).Error; err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 || ents[0].PurchaseID != p.ID || ents[0].AudienceMemberID != s.Member.ID || ents[0].ProductID != s.Product.ID {
		t.Fatalf("entitlements %+v, want one for purchase %d", ents, p.ID)
	}
	var evs []models.TrackedEvent
	if err := e.DB.Where("tenant_id = ?", s.ID).Find(&evs).Error; err != nil {
		t.Fatal(err)
	}
	if len(evs) != 1 || evs[0].Type != "purchase_completed" || evs[0].AudienceMemberID == nil ||
		*evs[0].AudienceMemberID != models.FormatID(s.Member.ID) {
		t.Fatalf("events %+v, want one purchase_completed of member %d", evs, s.Member.ID)
	}
	return p
}

// createCalls are the create-session requests the fake received.
func createCalls(f *testenv.FakePSP) []testenv.FakeRequest {
	var out []testenv.FakeRequest
	for _, c := range f.Calls() {
		if c.Method == "POST" && c.Path == "/v1/checkout/sessions" {
			out = append(out, c)
		}
	}
	return out
}

func TestCheckoutCreatesSessionOnConnectedAccount(t *testing.T) {
	e, fake := startCheckoutAPI(t)
	s := e.MustShop(false, "checkout:write")

	res := e.PostCheckout(s.Token, checkoutBody(s))
	if res.Status != 201 {
		t.Fatalf("POST: %d %s", res.Status, res.Body)
	}
	var raw map[string]map[string]any
	if err := json.Unmarshal(res.Body, &raw); err != nil || len(raw) != 1 || len(raw["data"]) != 2 {
		t.Fatalf("body %s, want exactly data.id and data.url", res.Body)
	}
	id, _ := raw["data"]["id"].(string)
	payURL, _ := raw["data"]["url"].(string)
	if !strings.HasPrefix(id, "cs_") || payURL != "https://checkout.fake/pay/"+id {
		t.Fatalf("body %s", res.Body)
	}

	calls := createCalls(fake)
	if len(calls) != 1 {
		t.Fatalf("%d create calls, want 1", len(calls))
	}
	c := calls[0]
	want := map[string]string{
		"mode":                                   "payment",
		"line_items[0][price_data][unit_amount]": "1999",
		"line_items[0][price_data][currency]":    "usd",
		"line_items[0][quantity]":                "1",
		"metadata[tenant_id]":                    models.FormatID(s.ID),
		"metadata[audience_member_id]":           models.FormatID(s.Member.ID),
		"metadata[product_id]":                   models.FormatID(s.Product.ID),
		"success_url":                            fmt.Sprintf("%s/checkout/return?tenant=%d&session_id={CHECKOUT_SESSION_ID}", checkoutAppURL, s.ID),
		"cancel_url":                             "https://shop.example/cancel",
	}
	if c.Account != s.Account {
		t.Fatalf("Stripe-Account %q, want %q", c.Account, s.Account)
	}
	for k, v := range want {
		if got := c.Form.Get(k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	if _, acct, ok := fake.Session(id); !ok || acct != s.Account {
		t.Fatalf("session %s on %q, want %q", id, acct, s.Account)
	}

	t.Run("accepts ids as JSON numbers", func(t *testing.T) {
		res := e.PostCheckout(s.Token, map[string]any{
			"audience_member_id": s.Member.ID, "product_id": s.Product.ID, "cancel_url": "https://shop.example/cancel",
		})
		if res.Status != 201 {
			t.Fatalf("POST: %d %s", res.Status, res.Body)
		}
		calls := createCalls(fake)
		if len(calls) != 2 || calls[1].Form.Get("metadata[audience_member_id]") != models.FormatID(s.Member.ID) ||
			calls[1].Form.Get("metadata[product_id]") != models.FormatID(s.Product.ID) {
			t.Fatalf("calls %+v", calls)
		}
	})
}

func TestCheckoutRejectsBadInput(t *testing.T) {
	e, fake := startCheckoutAPI(t)
	s := e.MustShop(false, "checkout:write")
	other := e.MustShop(false)

	invalid := func(field, msg string) string {
		return fmt.Sprintf(`{"message":%q,"errors":{%q:[%q]}}`, msg, field, msg)
	}
	with := func(key string, v any) map[string]any {
		b := checkoutBody(s)
		b[key] = v
		return b
	}
	weak := e.MustTenant(false, "events:read")
	cases := []struct {
		name, token string
		body        any
		status      int
		want        string
	}{
		{"rejects missing fields", s.Token, map[string]any{}, 422,
			`{"message":"The audience member id field is required. (and 2 more errors)","errors":{` +
				`"audience_member_id":["The audience member id field is required."],` +
				`"product_id":["The product id field is required."],` +
				`"cancel_url":["The cancel url field is required."]}}`},
		{"rejects invalid cancel url", s.Token, with("cancel_url", "not a url"), 422,
			invalid("cancel_url", "The cancel url field must be a valid URL.")},
		{"rejects non-http cancel url", s.Token, with("cancel_url", "javascript:alert(1)"), 422,
			invalid("cancel_url", "The cancel url field must be a valid URL.")},
		{"rejects member of another tenant", s.Token, with("audience_member_id", models.FormatID(other.Member.ID)), 422,
			invalid("audience_member_id", "The selected audience member id is invalid.")},
		{"rejects product of another tenant", s.Token, with("product_id", models.FormatID(other.Product.ID)), 422,
			invalid("product_id", "The selected product id is invalid.")},
		{"rejects unknown product", s.Token, with("product_id", "999999"), 422,
			invalid("product_id", "The selected product id is invalid.")},
		{"rejects non-numeric member id", s.Token, with("audience_member_id", "abc"), 422,
			invalid("audience_member_id", "The selected audience member id is invalid.")},
		{"rejects token without checkout:write", weak.Token, checkoutBody(s), 403, `{"message":"Invalid ability provided."}`},
		{"rejects missing token", "", checkoutBody(s), 401, `{"message":"Unauthenticated."}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := len(createCalls(fake))
			assertBody(t, e.PostCheckout(tc.token, tc.body), tc.status, tc.want)
			if n := len(createCalls(fake)) - before; n != 0 {
				t.Fatalf("provider got %d create calls, want 0", n)
			}
		})
	}
}

func TestCheckoutProviderDownIs502(t *testing.T) {
	e, fake := startCheckoutAPI(t)
	s := e.MustShop(false)
	cs := e.MustCheckout(s)
	fake.SetDown(true)
	const body = `{"message":"The payment provider could not be reached."}`

	t.Run("create answers 502 promptly", func(t *testing.T) {
		start := time.Now()
		assertBody(t, e.PostCheckout(s.Token, checkoutBody(s)), 502, body)
		if d := time.Since(start); d > 8*time.Second {
			t.Fatalf("took %v", d)
		}
	})
	t.Run("return page answers 502 promptly", func(t *testing.T) {
		start := time.Now()
		assertBody(t, e.ReturnJSON(s.ID, cs), 502, body)
		if d := time.Since(start); d > 8*time.Second {
			t.Fatalf("took %v", d)
		}
		if n := e.rows(t, &models.Purchase{}, s.ID); n != 0 {
			t.Fatalf("%d purchases, want 0", n)
		}
	})
}

func TestReturnPageFulfilsOnce(t *testing.T) {
	for _, flag := range []bool{true, false} {
		t.Run(fmt.Sprintf("queue flag %v", flag), func(t *testing.T) {
			e, fake := startCheckoutAPI(t)
			s := e.MustShop(flag)
			cs := e.MustCheckout(s)

			t.Run("unpaid session is pending", func(t *testing.T) {
				assertBody(t, e.ReturnJSON(s.ID, cs), 200, returnBody("pending", 0))
				if n := e.rows(t, &models.Purchase{}, s.ID); n != 0 {
					t.Fatalf("%d purchases, want 0", n)
				}
			})

			fake.Pay(cs)
			var purchase models.Purchase
			t.Run("paid session is fulfilled", func(t *testing.T) {
				res := e.ReturnJSON(s.ID, cs)
				if res.Status != 200 {
					t.Fatalf("got %d %s", res.Status, res.Body)
				}
				purchase = e.assertFulfilledOnce(t, s, cs)
				assertBody(t, res, 200, returnBody("fulfilled", purchase.ID))
				if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
					t.Fatalf("content type %q", ct)
				}
			})
			if purchase.ID == 0 {
				t.FailNow()
			}
			t.Run("event reaches the queue only when flagged", func(t *testing.T) {
				if !flag {
					if n := e.QueueLen(s.tenant); n != 0 {
						t.Fatalf("queue holds %d events, want 0", n)
					}
					return
				}
				got := e.MustRead(s.tenant)
				if got.Data.Count != 1 {
					t.Fatalf("queue %+v, want one event", got.Data)
				}
				ev := got.Data.Events[0]
				if ev.Type != "purchase_completed" || ev.AudienceMemberID == nil || *ev.AudienceMemberID != models.FormatID(s.Member.ID) {
					t.Fatalf("queued event %+v", ev)
				}
				var row models.TrackedEvent
				if err := e.DB.Where("tenant_id = ?", s.ID).Take(&row).Error; err != nil || row.ID != ev.ID {
					t.Fatalf("queued id %s, stored %s (%v)", ev.ID, row.ID, err)
				}
			})
			t.Run("second visit is already fulfilled", func(t *testing.T) {
				assertBody(t, e.ReturnJSON(s.ID, cs), 200, returnBody("already_fulfilled", purchase.ID))
				e.assertFulfilledOnce(t, s, cs)
				if flag {
					if n := e.QueueLen(s.tenant); n != 1 {
						t.Fatalf("queue holds %d events, want 1", n)
					}
				}
			})
			t.Run("browser gets an HTML thank-you page", func(t *testing.T) {
				res := e.Do("GET", returnPath(s.ID, cs), "", nil, "Accept", "text/html,application/xhtml+xml,*/*;q=0.8")
				if res.Status != 200 || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/html") ||
					!strings.Contains(string(res.Body), "Thank you") {
					t.Fatalf("got %d %q %s", res.Status, res.Header.Get("Content-Type"), res.Body)
				}
				e.assertFulfilledOnce(t, s, cs)
			})
		})
	}
}

func TestReturnPageRefusesForeignSessions(t *testing.T) {
	e, fake := startCheckoutAPI(t)
	a := e.MustShop(true)
	b := e.MustShop(true)
	const notFound = `{"message":"Not Found."}`
	metadata := func(s shop) map[string]string {
		return map[string]string{
			"tenant_id": models.FormatID(s.ID), "audience_member_id": models.FormatID(s.Member.ID),
			"product_id": models.FormatID(s.Product.ID),
		}
	}
	paid := func(account string, md map[string]string) string {
		cs := fake.AddSession(account, psp.SessionObject{
			AmountTotal: 1999, Currency: "usd", Mode: "payment", Metadata: md,
			PaymentStatus: "unpaid", Status: "open",
		})
		fake.Pay(cs.ID)
		return cs.ID
	}
	noPurchases := func(t *testing.T) {
		t.Helper()
		var n int64
		if err := e.DB.Model(&models.Purchase{}).Count(&n).Error; err != nil || n != 0 {
			t.Fatalf("%d purchases (%v), want 0", n, err)
		}
	}

	t.Run("rejects session naming another tenant", func(t *testing.T) {
		cs := paid(a.Account, metadata(b))
		assertBody(t, e.ReturnJSON(a.ID, cs), 404, notFound)
		assertBody(t, e.ReturnJSON(b.ID, cs), 404, notFound) // not on b's account
		noPurchases(t)
	})
	t.Run("rejects session on another connected account", func(t *testing.T) {
		cs := paid("acct_other", metadata(a))
		assertBody(t, e.ReturnJSON(a.ID, cs), 404, notFound)
		noPurchases(t)
	})
	t.Run("rejects session of another tenant's account", func(t *testing.T) {
		cs := paid(b.Account, metadata(a))
		assertBody(t, e.ReturnJSON(a.ID, cs), 404, notFound)
		assertBody(t, e.ReturnJSON(b.ID, cs), 404, notFound)
		noPurchases(t)
	})
	t.Run("rejects unknown session", func(t *testing.T) {
		assertBody(t, e.ReturnJSON(a.ID, "cs_test_nope"), 404, notFound)
	})
	t.Run("rejects unknown tenant", func(t *testing.T) {
		cs := paid(a.Account, metadata(a))
		assertBody(t, e.ReturnJSON(999999, cs), 404, notFound)
		noPurchases(t)
	})
	t.Run("rejects missing parameters", func(t *testing.T) {
		for _, path := range []string{
			"/checkout/return", "/checkout/return?tenant=" + models.FormatID(a.ID),
			"/checkout/return?session_id=cs_test_x", "/checkout/return?tenant=abc&session_id=cs_test_x",
			"/checkout/return?tenant=" + models.FormatID(a.ID) + "&session_id=",
		} {
			assertBody(t, e.Do("GET", path, "", nil, "Accept", "application/json"), 404, notFound)
		}
	})
	t.Run("rejects session for a member unknown to the tenant", func(t *testing.T) {
		md := metadata(a)
		md["audience_member_id"] = models.FormatID(b.Member.ID)
		cs := paid(a.Account, md)
		assertBody(t, e.ReturnJSON(a.ID, cs), 404, notFound)
		noPurchases(t)
	})
	if e.QueueLen(a.tenant) != 0 || e.QueueLen(b.tenant) != 0 {
		t.Fatal("an event reached a queue")
	}
}

func TestReturnPageConcurrentVisitsFulfilOnce(t *testing.T) {
	e, fake := startCheckoutAPI(t)
	s := e.MustShop(true)
	cs := e.MustCheckout(s)
	fake.Pay(cs)

	const n = 10
	var (
		wg     sync.WaitGroup
		start  = make(chan struct{})
		bodies = make([]string, n)
		errs   = make([]error, n)
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			req, _ := http.NewRequest("GET", e.Base+returnPath(s.ID, cs), nil)
			req.Header.Set("Accept", "application/json")
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				errs[i] = err
				return
			}
			defer res.Body.Close()
			b, _ := io.ReadAll(res.Body)
			if res.StatusCode != 200 {
				errs[i] = fmt.Errorf("status %d: %s", res.StatusCode, b)
			}
			bodies[i] = string(b)
		}()
	}
	close(start)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	p := e.assertFulfilledOnce(t, s, cs)
	fulfilled, already := 0, 0
	for _, b := range bodies {
		switch b {
		case returnBody("fulfilled", p.ID):
			fulfilled++
		case returnBody("already_fulfilled", p.ID):
			already++
		default:
			t.Fatalf("unexpected body %s", b)
		}
	}
	if fulfilled != 1 || already != n-1 {
		t.Fatalf("%d fulfilled and %d already_fulfilled, want 1 and %d", fulfilled, already, n-1)
	}
	if got := e.QueueLen(s.tenant); got != 1 {
		t.Fatalf("queue holds %d events, want 1", got)
	}
}

func TestReturnPageChecksMetadataTenantOnPlatformAccount(t *testing.T) {
	// Neither tenant has a connected account: both sessions live on the platform account, so
	// only the return page's metadata check keeps one tenant from fulfilling the other's.
	e, fake := startCheckoutAPI(t)
	p, q := e.mustShopOn(false, true), e.mustShopOn(false, true)
	cs := e.MustCheckout(q)
	if _, acct, _ := fake.Session(cs); acct != "" {
		t.Fatalf("session on %q, want the platform", acct)
	}
	fake.Pay(cs)

	t.Run("rejects session naming another tenant", func(t *testing.T) {
		assertBody(t, e.ReturnJSON(p.ID, cs), 404, `{"message":"Not Found."}`)
		if n := e.rows(t, &models.Purchase{}, p.ID) + e.rows(t, &models.Purchase{}, q.ID); n != 0 {
			t.Fatalf("%d purchases, want 0", n)
		}
	})
	t.Run("fulfils in the tenant the metadata names", func(t *testing.T) {
		res := e.ReturnJSON(q.ID, cs)
		assertBody(t, res, 200, returnBody("fulfilled", e.assertFulfilledOnce(t, q, cs).ID))
	})
}

// Without PSP_SECRET_KEY, checkout creation and the return page answer 503 and the provider
// hears nothing: no anonymous call to its production API.
func TestCheckoutWithoutKeyIs503AndSendsNothing(t *testing.T) {
	fake := testenv.StartFakePSP(t)
	e := startAPI(t, "PSP_API_BASE="+fake.URL, "APP_URL="+checkoutAppURL)
	s := e.MustShop(false)
	cs := fake.AddSession(s.Account, psp.SessionObject{
		AmountTotal: 1999, Currency: "usd", Mode: "payment", PaymentStatus: "unpaid", Status: "open",
		Metadata: map[string]string{"tenant_id": models.FormatID(s.ID), "audience_member_id": models.FormatID(s.Member.ID),
			"product_id": models.FormatID(s.Product.ID)},
	})
	fake.Pay(cs.ID)
	const body = `{"message":"Service Unavailable."}`

	t.Run("create answers 503", func(t *testing.T) {
		assertBody(t, e.PostCheckout(s.Token, checkoutBody(s)), 503, body)
	})
	t.Run("return page answers 503 and fulfils nothing", func(t *testing.T) {
		assertBody(t, e.ReturnJSON(s.ID, cs.ID), 503, body)
		res := e.Do("GET", returnPath(s.ID, cs.ID), "", nil, "Accept", "text/html")
		if res.Status != 503 {
			t.Fatalf("HTML return page: %d %s", res.Status, res.Body)
		}
		if n := e.rows(t, &models.Purchase{}, s.ID); n != 0 {
			t.Fatalf("%d purchases, want 0", n)
		}
	})
	t.Run("the provider received nothing", func(t *testing.T) {
		if calls := fake.Calls(); len(calls) != 0 {
			t.Fatalf("the provider received %d calls: %+v", len(calls), calls)
		}
	})
}
