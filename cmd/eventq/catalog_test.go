package main

import (
	"strings"
	"testing"

	"github.com/eventq/eventq/models"
)

func TestMemberCreate(t *testing.T) {
	keys := []string{"id", "email"}

	t.Run("creates a member", func(t *testing.T) {
		e := newCLI(t)
		tenant := e.mustTenant(t, "Acme")
		out := e.MustObject(t, keys, "member", "create", "--tenant", tenant, "--email", "ada@example.com", "--name", "Ada")
		id := str(t, out, "id")
		if got := str(t, out, "email"); got != "ada@example.com" {
			t.Errorf("email = %q, want ada@example.com", got)
		}
		var row models.AudienceMember
		if err := e.db.Where("id = ?", id).Take(&row).Error; err != nil {
			t.Fatalf("member row %s: %v", id, err)
		}
		if models.FormatID(row.TenantID) != tenant || row.Email != "ada@example.com" || row.Name != "Ada" {
			t.Errorf("row = %+v, want tenant %s, ada@example.com, Ada", row, tenant)
		}
	})

	t.Run("allows the same email at two tenants", func(t *testing.T) {
		e := newCLI(t)
		a := e.MustObject(t, keys, "member", "create", "--tenant", e.mustTenant(t, "A"), "--email", "ada@example.com")
		b := e.MustObject(t, keys, "member", "create", "--tenant", e.mustTenant(t, "B"), "--email", "ada@example.com")
		if str(t, a, "id") == str(t, b, "id") {
			t.Errorf("both members got id %s", str(t, a, "id"))
		}
	})

	for _, tc := range []struct {
		name    string
		email   string
		wantMsg string
	}{
		{"fails on a bad email", "not-an-email", "--email"},
		{"fails on an email with a display name", "Ada <ada@example.com>", "--email"},
		{"fails on an empty email", "", "--email"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newCLI(t)
			tenant := e.mustTenant(t, "Acme")
			stderr := e.MustFail(t, "member", "create", "--tenant", tenant, "--email", tc.email)
			if !strings.Contains(stderr, tc.wantMsg) {
				t.Errorf("stderr %q does not mention %s", stderr, tc.wantMsg)
			}
		})
	}

	// An address is not an identity (a site may have two accounts with one address); the
	// tenant's own id is, and it is unique.
	t.Run("takes a second member with the same email, not the same external id", func(t *testing.T) {
		e := newCLI(t)
		tenant := e.mustTenant(t, "Acme")
		first := e.MustObject(t, keys, "member", "create", "--tenant", tenant, "--email", "ada@example.com", "--external-id", "u-1")
		second := e.MustObject(t, keys, "member", "create", "--tenant", tenant, "--email", "ada@example.com")
		if str(t, first, "id") == str(t, second, "id") {
			t.Fatalf("one id for two members: %v", first)
		}
		stderr := e.MustFail(t, "member", "create", "--tenant", tenant, "--email", "bob@example.com", "--external-id", "u-1")
		if !strings.Contains(stderr, "--external-id: The external id has already been taken.") {
			t.Errorf("stderr %q", stderr)
		}
	})

	t.Run("fails for an unknown tenant", func(t *testing.T) {
		e := newCLI(t)
		e.mustTenant(t, "Acme")
		e.MustFail(t, "member", "create", "--tenant", "999999", "--email", "ada@example.com")
		e.MustFail(t, "member", "create", "--email", "ada@example.com")
	})
}

func TestProductCreate(t *testing.T) {
	keys := []string{"id", "name", "amount", "currency"}

	t.Run("creates a product", func(t *testing.T) {
		e := newCLI(t)
		tenant := e.mustTenant(t, "Acme")
		raw := e.MustRun(t, "product", "create", "--tenant", tenant, "--name", "Course", "--amount", "1999", "--currency", "usd")
		out := mustObjectKeys(t, raw, keys)
		id := str(t, out, "id")
		if want := `{"id":"` + id + `","name":"Course","amount":1999,"currency":"usd"}`; string(raw) != want {
			t.Errorf("stdout %s, want %s", raw, want)
		}
		var row models.Product
		if err := e.db.Where("id = ?", id).Take(&row).Error; err != nil {
			t.Fatalf("product row %s: %v", id, err)
		}
		if models.FormatID(row.TenantID) != tenant || row.Name != "Course" || row.Amount != 1999 || row.Currency != "usd" {
			t.Errorf("row = %+v", row)
		}
	})

	t.Run("accepts a free product and an upper-case currency", func(t *testing.T) {
		e := newCLI(t)
		tenant := e.mustTenant(t, "Acme")
		raw := e.MustRun(t, "product", "create", "--tenant", tenant, "--name", "Free", "--amount", "0", "--currency", "EUR")
		out := mustObjectKeys(t, raw, keys)
		if want := `{"id":"` + str(t, out, "id") + `","name":"Free","amount":0,"currency":"eur"}`; string(raw) != want {
			t.Errorf("stdout %s, want %s", raw, want)
		}
	})

	for _, tc := range []struct {
		name    string
		args    []string
		wantMsg string
	}{
		{"fails on a bad currency", []string{"--name", "C", "--amount", "100", "--currency", "dollars"}, "--currency"},
		{"fails on a two-letter currency", []string{"--name", "C", "--amount", "100", "--currency", "us"}, "--currency"},
		{"fails without a currency", []string{"--name", "C", "--amount", "100"}, "--currency"},
		{"fails on a negative amount", []string{"--name", "C", "--amount=-5", "--currency", "usd"}, "--amount"},
		{"fails on a fractional amount", []string{"--name", "C", "--amount", "19.99", "--currency", "usd"}, "amount"},
		{"fails without an amount", []string{"--name", "C", "--currency", "usd"}, "--amount"},
		{"fails without a name", []string{"--amount", "100", "--currency", "usd"}, "--name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newCLI(t)
			tenant := e.mustTenant(t, "Acme")
			stderr := e.MustFail(t, append([]string{"product", "create", "--tenant", tenant}, tc.args...)...)
			if !strings.Contains(stderr, tc.wantMsg) {
				t.Errorf("stderr %q does not mention %s", stderr, tc.wantMsg)
			}
			if n := e.count(t, &models.Product{}); n != 0 {
				t.Errorf("%d product rows, want 0", n)
			}
		})
	}

	t.Run("fails for an unknown tenant", func(t *testing.T) {
		e := newCLI(t)
		e.mustTenant(t, "Acme")
		e.MustFail(t, "product", "create", "--tenant", "999999", "--name", "C", "--amount", "100", "--currency", "usd")
	})
}
