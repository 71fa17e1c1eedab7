package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/eventq/eventq/models"
)

var (
	purchaseKeys = []string{"id", "audience_member_id", "product_id", "psp_checkout_session_id",
		"amount_total", "currency", "created_at", "status"}
	entitlementKeys = []string{"id", "audience_member_id", "product_id", "purchase_id"}
)

// mustMember creates an audience member of tenantID through the CLI and returns its id.
func (e *cliEnv) mustMember(t *testing.T, tenantID, email string) string {
	t.Helper()
	return str(t, e.MustObject(t, []string{"id", "email"}, "member", "create", "--tenant", tenantID, "--email", email), "id")
}

// mustProduct creates a product of tenantID through the CLI and returns its id.
func (e *cliEnv) mustProduct(t *testing.T, tenantID string, amount int64, currency string) string {
	t.Helper()
	out := e.MustObject(t, []string{"id", "name", "amount", "currency"}, "product", "create", "--tenant", tenantID,
		"--name", "Course", "--amount", fmt.Sprint(amount), "--currency", currency)
	return str(t, out, "id")
}

// mustID parses an id printed by the CLI.
func (e *cliEnv) mustID(t *testing.T, s string) uint64 {
	t.Helper()
	id, ok := models.ParseID(s)
	if !ok {
		t.Fatalf("bad id %q", s)
	}
	return id
}

// insertPurchase stores a purchase and its entitlement, as fulfilment does, and returns both.
func (e *cliEnv) insertPurchase(t *testing.T, tenantID, memberID, productID, session string, amount int64, at time.Time) (models.Purchase, models.Entitlement) {
	t.Helper()
	p := models.Purchase{
		TenantID: e.mustID(t, tenantID), AudienceMemberID: e.mustID(t, memberID), ProductID: e.mustID(t, productID),
		PSPCheckoutSessionID: session, PSPPaymentIntentID: "pi_" + session, AmountTotal: amount, Currency: "usd",
		CreatedAt: at, UpdatedAt: at,
	}
	if err := e.db.Create(&p).Error; err != nil {
		t.Fatalf("insert purchase: %v", err)
	}
	ent := models.Entitlement{TenantID: p.TenantID, AudienceMemberID: p.AudienceMemberID, ProductID: p.ProductID, PurchaseID: p.ID}
	if err := e.db.Create(&ent).Error; err != nil {
		t.Fatalf("insert entitlement: %v", err)
	}
	return p, ent
}

func TestPurchasesList(t *testing.T) {
	t.Run("prints an empty array for a tenant without purchases", func(t *testing.T) {
		e := newCLI(t)
		tenant := e.mustTenant(t, "Acme")
		if raw := e.MustRun(t, "purchases", "list", "--tenant", tenant); string(raw) != "[]" {
			t.Errorf("stdout %s, want []", raw)
		}
	})

	t.Run("prints one purchase with string ids, an integer amount and a +00:00 time", func(t *testing.T) {
		e := newCLI(t)
		tenant := e.mustTenant(t, "Acme")
		member := e.mustMember(t, tenant, "ada@example.com")
		product := e.mustProduct(t, tenant, 1999, "usd")
		at := time.Date(2026, 11, 21, 12, 15, 30, 0, time.FixedZone("CEST", 2*3600))
		p, _ := e.insertPurchase(t, tenant, member, product, "cs_test_1", 1999, at)

		raw := e.MustRun(t, "purchases", "list", "--tenant", tenant)
		want := fmt.Sprintf(`[{"id":"%d","audience_member_id":"%s","product_id":"%s",`+
			`"psp_checkout_session_id":"cs_test_1","amount_total":1999,"currency":"usd",`+
			`"created_at":"2026-11-21T10:15:30+00:00","status":"paid"}]`, p.ID, member, product)
		if string(raw) != want {
			t.Errorf("stdout\n%s\nwant\n%s", raw, want)
		}
		e.MustArray(t, purchaseKeys, "purchases", "list", "--tenant", tenant)
	})

	t.Run("prints only the tenant's purchases, oldest first", func(t *testing.T) {
		e := newCLI(t)
		tenant, other := e.mustTenant(t, "Acme"), e.mustTenant(t, "Other")
		member, product := e.mustMember(t, tenant, "ada@example.com"), e.mustProduct(t, tenant, 500, "usd")
		otherMember, otherProduct := e.mustMember(t, other, "bob@example.com"), e.mustProduct(t, other, 700, "usd")
		base := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
		e.insertPurchase(t, tenant, member, product, "cs_3", 300, base.Add(3*time.Minute))
		e.insertPurchase(t, tenant, member, product, "cs_1", 100, base.Add(1*time.Minute))
		e.insertPurchase(t, other, otherMember, otherProduct, "cs_x", 999, base.Add(2*time.Minute))
		e.insertPurchase(t, tenant, member, product, "cs_2", 200, base.Add(2*time.Minute))
		// Same time as cs_2 but inserted later: the id breaks the tie.
		e.insertPurchase(t, tenant, member, product, "cs_2b", 250, base.Add(2*time.Minute))

		items := e.MustArray(t, purchaseKeys, "purchases", "list", "--tenant", tenant)
		var got []string
		for _, it := range items {
			got = append(got, fmt.Sprintf("%s/%v", str(t, it, "psp_checkout_session_id"), it["amount_total"]))
		}
		if want := "[cs_1/100 cs_2/200 cs_2b/250 cs_3/300]"; fmt.Sprint(got) != want {
			t.Errorf("purchases %v, want %s", got, want)
		}
	})

	t.Run("prints each purchase's status", func(t *testing.T) {
		e := newCLI(t)
		tenant := e.mustTenant(t, "Acme")
		member, product := e.mustMember(t, tenant, "ada@example.com"), e.mustProduct(t, tenant, 500, "usd")
		base := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
		for i, status := range []string{models.PurchasePaid, models.PurchaseRefunded, models.PurchaseDisputed} {
			p, _ := e.insertPurchase(t, tenant, member, product, "cs_"+status, 500, base.Add(time.Duration(i)*time.Minute))
			if err := e.db.Model(&p).Update("status", status).Error; err != nil {
				t.Fatal(err)
			}
		}
		var got []string
		for _, it := range e.MustArray(t, purchaseKeys, "purchases", "list", "--tenant", tenant) {
			got = append(got, str(t, it, "status"))
		}
		if want := "[paid refunded disputed]"; fmt.Sprint(got) != want {
			t.Errorf("statuses %v, want %s", got, want)
		}
	})

	t.Run("fails for an unknown tenant", func(t *testing.T) {
		e := newCLI(t)
		e.mustTenant(t, "Acme")
		if stderr := e.MustFail(t, "purchases", "list", "--tenant", "999999"); !strings.Contains(stderr, "tenant 999999 not found") {
			t.Errorf("stderr %q does not say the tenant is not found", stderr)
		}
		if stderr := e.MustFail(t, "purchases", "list"); !strings.Contains(stderr, "--tenant") {
			t.Errorf("stderr %q does not mention --tenant", stderr)
		}
	})
}

func TestEntitlementsList(t *testing.T) {
	t.Run("prints an empty array for a tenant without entitlements", func(t *testing.T) {
		e := newCLI(t)
		tenant := e.mustTenant(t, "Acme")
		if raw := e.MustRun(t, "entitlements", "list", "--tenant", tenant); string(raw) != "[]" {
			t.Errorf("stdout %s, want []", raw)
		}
	})

	t.Run("prints the tenant's entitlements by id with string ids", func(t *testing.T) {
		e := newCLI(t)
		tenant, other := e.mustTenant(t, "Acme"), e.mustTenant(t, "Other")
		ada, bob := e.mustMember(t, tenant, "ada@example.com"), e.mustMember(t, tenant, "bob@example.com")
		product := e.mustProduct(t, tenant, 500, "usd")
		otherMember, otherProduct := e.mustMember(t, other, "ada@example.com"), e.mustProduct(t, other, 700, "usd")
		at := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
		p1, ent1 := e.insertPurchase(t, tenant, ada, product, "cs_1", 500, at.Add(time.Minute))
		e.insertPurchase(t, other, otherMember, otherProduct, "cs_x", 700, at)
		_, ent2 := e.insertPurchase(t, tenant, bob, product, "cs_2", 500, at)

		raw := e.MustRun(t, "entitlements", "list", "--tenant", tenant)
		want := fmt.Sprintf(`[{"id":"%d","audience_member_id":"%s","product_id":"%s","purchase_id":"%d"},`+
			`{"id":"%d","audience_member_id":"%s","product_id":"%s","purchase_id":"%d"}]`,
			ent1.ID, ada, product, p1.ID, ent2.ID, bob, product, ent2.PurchaseID)
		if string(raw) != want {
			t.Errorf("stdout\n%s\nwant\n%s", raw, want)
		}
		e.MustArray(t, entitlementKeys, "entitlements", "list", "--tenant", tenant)
	})

	t.Run("filters by --member", func(t *testing.T) {
		e := newCLI(t)
		tenant := e.mustTenant(t, "Acme")
		ada, bob := e.mustMember(t, tenant, "ada@example.com"), e.mustMember(t, tenant, "bob@example.com")
		product := e.mustProduct(t, tenant, 500, "usd")
		at := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
		e.insertPurchase(t, tenant, ada, product, "cs_1", 500, at)
		_, bobEnt := e.insertPurchase(t, tenant, bob, product, "cs_2", 500, at)
		e.insertPurchase(t, tenant, ada, product, "cs_3", 500, at)

		items := e.MustArray(t, entitlementKeys, "entitlements", "list", "--tenant", tenant, "--member", bob)
		if len(items) != 1 || str(t, items[0], "id") != models.FormatID(bobEnt.ID) || str(t, items[0], "audience_member_id") != bob {
			t.Errorf("entitlements %v, want only bob's %d", items, bobEnt.ID)
		}
		if items := e.MustArray(t, entitlementKeys, "entitlements", "list", "--tenant", tenant, "--member", ada); len(items) != 2 {
			t.Errorf("%d entitlements of ada, want 2", len(items))
		}
		if raw := e.MustRun(t, "entitlements", "list", "--tenant", tenant, "--member", "999999"); string(raw) != "[]" {
			t.Errorf("unknown member: stdout %s, want []", raw)
		}
	})

	t.Run("shows only entitlements in force", func(t *testing.T) {
		e := newCLI(t)
		tenant := e.mustTenant(t, "Acme")
		ada := e.mustMember(t, tenant, "ada@example.com")
		product := e.mustProduct(t, tenant, 500, "usd")
		at := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
		_, kept := e.insertPurchase(t, tenant, ada, product, "cs_1", 500, at)
		_, revoked := e.insertPurchase(t, tenant, ada, product, "cs_2", 500, at)
		if err := e.db.Model(&revoked).Update("revoked_at", at.Add(time.Hour)).Error; err != nil {
			t.Fatal(err)
		}
		for _, args := range [][]string{{"--tenant", tenant}, {"--tenant", tenant, "--member", ada}} {
			items := e.MustArray(t, entitlementKeys, append([]string{"entitlements", "list"}, args...)...)
			if len(items) != 1 || str(t, items[0], "id") != models.FormatID(kept.ID) {
				t.Errorf("entitlements list %v: %v, want only %d", args, items, kept.ID)
			}
		}
	})

	t.Run("fails on a bad --member", func(t *testing.T) {
		e := newCLI(t)
		tenant := e.mustTenant(t, "Acme")
		for _, member := range []string{"", "0", "-1", "ada", "1.5"} {
			if stderr := e.MustFail(t, "entitlements", "list", "--tenant", tenant, "--member="+member); !strings.Contains(stderr, "--member") {
				t.Errorf("--member %q: stderr %q does not mention --member", member, stderr)
			}
		}
	})

	t.Run("fails for an unknown tenant", func(t *testing.T) {
		e := newCLI(t)
		e.mustTenant(t, "Acme")
		if stderr := e.MustFail(t, "entitlements", "list", "--tenant", "999999"); !strings.Contains(stderr, "tenant 999999 not found") {
			t.Errorf("stderr %q does not say the tenant is not found", stderr)
		}
		e.MustFail(t, "entitlements", "list", "--tenant", "999999", "--member", "1")
		e.MustFail(t, "entitlements", "list")
	})
}
