package main

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/models"
)

var tenantKeys = []string{"id", "name", "site_key", "psp_account_id"}

func TestTenantCreate(t *testing.T) {
	t.Run("prints null psp_account_id without --psp-account", func(t *testing.T) {
		e := newCLI(t)
		raw := e.MustRun(t, "tenant", "create", "--name", "Acme Shop")
		re := regexp.MustCompile(`^\{"id":"([1-9][0-9]*)","name":"Acme Shop","site_key":"(site_[0-9a-f]{32})","psp_account_id":null\}$`)
		m := re.FindStringSubmatch(string(raw))
		if m == nil {
			t.Fatalf("stdout %s does not match %s", raw, re)
		}
		var row models.Tenant
		if err := e.db.Where("id = ?", m[1]).Take(&row).Error; err != nil {
			t.Fatalf("tenant row %s: %v", m[1], err)
		}
		if row.Name != "Acme Shop" || row.SiteKey != m[2] || row.PSPAccountID != nil {
			t.Errorf("row = %+v, want name Acme Shop, site key %s, no account", row, m[2])
		}
	})

	t.Run("prints the account id with --psp-account", func(t *testing.T) {
		e := newCLI(t)
		out := e.MustObject(t, tenantKeys, "tenant", "create", "--name", "Acme", "--psp-account", "acct_1ABC")
		if got := str(t, out, "psp_account_id"); got != "acct_1ABC" {
			t.Errorf("psp_account_id = %q, want acct_1ABC", got)
		}
		var row models.Tenant
		if err := e.db.Where("id = ?", str(t, out, "id")).Take(&row).Error; err != nil {
			t.Fatalf("tenant row: %v", err)
		}
		if row.PSPAccountID == nil || *row.PSPAccountID != "acct_1ABC" {
			t.Errorf("row psp_account_id = %v, want acct_1ABC", row.PSPAccountID)
		}
	})

	t.Run("gives each tenant its own id and site key", func(t *testing.T) {
		e := newCLI(t)
		a := e.MustObject(t, tenantKeys, "tenant", "create", "--name", "A")
		b := e.MustObject(t, tenantKeys, "tenant", "create", "--name", "B")
		if str(t, a, "id") == str(t, b, "id") || str(t, a, "site_key") == str(t, b, "site_key") {
			t.Errorf("two tenants share an id or site key: %v %v", a, b)
		}
	})

	t.Run("trims the name", func(t *testing.T) {
		e := newCLI(t)
		out := e.MustObject(t, tenantKeys, "tenant", "create", "--name", "  Padded  ")
		if got := str(t, out, "name"); got != "Padded" {
			t.Errorf("name = %q, want Padded", got)
		}
	})

	for _, tc := range []struct {
		name    string
		args    []string
		wantMsg string
	}{
		{"fails without --name", []string{"tenant", "create"}, "--name"},
		{"fails with a blank --name", []string{"tenant", "create", "--name", "   "}, "--name"},
		{"fails with an invalid --psp-account", []string{"tenant", "create", "--name", "A", "--psp-account", "cus_123"}, "--psp-account"},
		{"fails with positional arguments", []string{"tenant", "create", "--name", "A", "extra"}, "extra"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newCLI(t)
			stderr := e.MustFail(t, tc.args...)
			if !strings.Contains(stderr, tc.wantMsg) {
				t.Errorf("stderr %q does not mention %s", stderr, tc.wantMsg)
			}
			if n := e.count(t, &models.Tenant{}); n != 0 {
				t.Errorf("%d tenant rows, want 0", n)
			}
		})
	}
}

// `tenant list` prints every tenant in id order (across pages of 100), and `token list` a
// tenant's tokens without their secrets.
func TestTenantAndTokenList(t *testing.T) {
	e := newCLI(t)
	var ids []string
	for i := range 101 {
		ids = append(ids, e.mustTenant(t, fmt.Sprintf("Shop %d", i)))
	}
	var listed []struct {
		ID      string `json:"id"`
		SiteKey string `json:"site_key"`
	}
	testenv.Must(t, json.Unmarshal(e.MustRun(t, "tenant", "list"), &listed))
	if len(listed) != len(ids) || listed[0].ID != ids[0] || listed[100].ID != ids[100] || listed[100].SiteKey == "" {
		t.Fatalf("tenant list: %d tenants, want %d in id order", len(listed), len(ids))
	}
	id, secret, _ := e.mustToken(t, ids[0], "--name", "ci")
	raw := e.MustRun(t, "token", "list", "--tenant", ids[0])
	if strings.Contains(string(raw), secret) || !strings.Contains(string(raw), `"id":"`+id+`","name":"ci"`) {
		t.Fatalf("token list: %s", raw)
	}
	if raw := e.MustRun(t, "token", "list", "--tenant", ids[1]); string(raw) != "[]" {
		t.Fatalf("token list of a tenant without tokens: %s", raw)
	}
	e.MustFail(t, "token", "list", "--tenant", "999999")
}
