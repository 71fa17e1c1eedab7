package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/eventq/eventq/internal/psp"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/models"
)

func TestCheckoutCreatesSessionOnConnectedAccount(t *testing.T) {
	e, fake := startCheckoutAPI(t)
	s := mustShop(t, e, false, "checkout:write")

	res := e.PostCheckout(t, s.Token, checkoutBody(s))
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
		res := e.PostCheckout(t, s.Token, map[string]any{
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
	s := mustShop(t, e, false, "checkout:write")
	other := mustShop(t, e, false)

	invalid := func(field, msg string) string {
		return fmt.Sprintf(`{"message":%q,"errors":{%q:[%q]}}`, msg, field, msg)
	}
	with := func(key string, v any) map[string]any {
		b := checkoutBody(s)
		b[key] = v
		return b
	}
	weak := testenv.MustTenant(t, e.DB, false, "events:read")
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
			assertBody(t, e.PostCheckout(t, tc.token, tc.body), tc.status, tc.want)
			if n := len(createCalls(fake)) - before; n != 0 {
				t.Fatalf("provider got %d create calls, want 0", n)
			}
		})
	}
}

func TestCheckoutProviderDownIs502(t *testing.T) {
	e, fake := startCheckoutAPI(t)
	s := mustShop(t, e, false)
	cs := e.MustCheckout(t, s)
	fake.SetDown(true)
	const body = `{"message":"The payment provider could not be reached."}`

	t.Run("create answers 502 promptly", func(t *testing.T) {
		start := time.Now()
		assertBody(t, e.PostCheckout(t, s.Token, checkoutBody(s)), 502, body)
		if d := time.Since(start); d > 8*time.Second {
			t.Fatalf("took %v", d)
		}
	})
	t.Run("return page answers 502 promptly", func(t *testing.T) {
		start := time.Now()
		assertBody(t, e.ReturnJSON(t, s.ID, cs), 502, body)
		if d := time.Since(start); d > 8*time.Second {
			t.Fatalf("took %v", d)
		}
		if n := e.rows(t, &models.Purchase{}, s.ID); n != 0 {
			t.Fatalf("%d purchases, want 0", n)
		}
	})
}

// Without PSP_SECRET_KEY, checkout creation and the return page answer 503 and the provider
// hears nothing: no anonymous call to its production API.
func TestCheckoutWithoutKeyIs503AndSendsNothing(t *testing.T) {
	fake := testenv.StartFakePSP(t)
	e := startAPI(t, "PSP_API_BASE="+fake.URL, "APP_URL="+checkoutAppURL)
	s := mustShop(t, e, false)
	cs := fake.AddSession(s.Account, psp.SessionObject{
		AmountTotal: 1999, Currency: "usd", Mode: "payment", PaymentStatus: "unpaid", Status: "open",
		Metadata: map[string]string{"tenant_id": models.FormatID(s.ID), "audience_member_id": models.FormatID(s.Member.ID),
			"product_id": models.FormatID(s.Product.ID)},
	})
	fake.Pay(cs.ID)
	const body = `{"message":"Service Unavailable."}`

	t.Run("create answers 503", func(t *testing.T) {
		assertBody(t, e.PostCheckout(t, s.Token, checkoutBody(s)), 503, body)
	})
	t.Run("return page answers 503 and fulfils nothing", func(t *testing.T) {
		assertBody(t, e.ReturnJSON(t, s.ID, cs.ID), 503, body)
		res := e.Do(t, "GET", returnPath(s.ID, cs.ID), "", nil, "Accept", "text/html")
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
