package main

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

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

// shop is a tenant with a connected account (usually), a member and a product.
type shop = testenv.Shop

var accounts atomic.Int64

// mustShop creates a shop (testenv.MustShop) on a connected account of its own; UseQueueEvents
// is flag and the token carries abilities (default "*").
func mustShop(t *testing.T, e *apiEnv, flag bool, abilities ...string) shop {
	t.Helper()
	return testenv.MustShop(t, e.DB, fmt.Sprintf("acct_test_%d", accounts.Add(1)), flag, abilities...)
}

type checkoutCreated struct {
	Data struct {
		ID  string `json:"id"`
		URL string `json:"url"`
	} `json:"data"`
}

// PostCheckout posts body to the checkout endpoint with tn's token.
func (e *apiEnv) PostCheckout(t *testing.T, token string, body any) response {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	return e.Do(t, "POST", "/api/platform/checkout/sessions", token, b, "Content-Type", "application/json", "Accept", "application/json")
}

// MustCheckout creates a checkout session for s's member and product and returns its id.
func (e *apiEnv) MustCheckout(t *testing.T, s shop) string {
	t.Helper()
	res := e.PostCheckout(t, s.Token, checkoutBody(s))
	if res.Status != 201 {
		t.Fatalf("POST checkout: %d %s", res.Status, res.Body)
	}
	var out checkoutCreated
	if err := json.Unmarshal(res.Body, &out); err != nil || !strings.HasPrefix(out.Data.ID, "cs_") {
		t.Fatalf("bad 201 body %s", res.Body)
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
func (e *apiEnv) ReturnJSON(t *testing.T, tenantID uint64, session string) response {
	t.Helper()
	return e.Do(t, "GET", returnPath(tenantID, session), "", nil, "Accept", "application/json")
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
