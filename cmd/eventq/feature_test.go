package main

import (
	"strings"
	"testing"

	"github.com/eventq/eventq/models"
)

// featureRows returns the features rows of tenantID.
func (e *cliEnv) featureRows(t *testing.T, tenantID string) []models.Feature {
	t.Helper()
	var rows []models.Feature
	if err := e.db.Where("scope = ?", `App\Models\Tenant|`+tenantID).Order("id").Find(&rows).Error; err != nil {
		t.Fatalf("features rows: %v", err)
	}
	return rows
}

func TestFeature(t *testing.T) {
	keys := []string{"feature", "tenant_id", "active"}

	t.Run("activates and deactivates UseQueueEvents in one row", func(t *testing.T) {
		e := newCLI(t)
		tenant := e.mustTenant(t, "Acme")
		other := e.mustTenant(t, "Other")
		steps := []struct {
			verb      string
			wantValue string
		}{
			{"activate", "true"},
			{"activate", "true"},
			{"deactivate", "false"},
			{"deactivate", "false"},
			{"activate", "true"},
		}
		for _, s := range steps {
			raw := e.MustRun(t, "feature", s.verb, "UseQueueEvents", "--tenant", tenant)
			mustObjectKeys(t, raw, keys)
			want := `{"feature":"UseQueueEvents","tenant_id":"` + tenant + `","active":` + s.wantValue + `}`
			if string(raw) != want {
				t.Errorf("feature %s printed %s, want %s", s.verb, raw, want)
			}
			rows := e.featureRows(t, tenant)
			if len(rows) != 1 {
				t.Fatalf("after %s: %d features rows, want 1: %+v", s.verb, len(rows), rows)
			}
			if rows[0].Name != "UseQueueEvents" || rows[0].Value != s.wantValue {
				t.Errorf("after %s: row %+v, want name UseQueueEvents value %s", s.verb, rows[0], s.wantValue)
			}
		}
		if n := len(e.featureRows(t, other)); n != 0 {
			t.Errorf("other tenant has %d features rows, want 0", n)
		}
		if n := e.count(t, &models.Feature{}); n != 1 {
			t.Errorf("%d features rows in all, want 1", n)
		}
	})

	t.Run("deactivates a feature never activated", func(t *testing.T) {
		e := newCLI(t)
		tenant := e.mustTenant(t, "Acme")
		e.MustObject(t, keys, "feature", "deactivate", "UseQueueEvents", "--tenant", tenant)
		rows := e.featureRows(t, tenant)
		if len(rows) != 1 || rows[0].Value != "false" {
			t.Errorf("rows = %+v, want one with value false", rows)
		}
	})

	for _, tc := range []struct {
		name    string
		args    func(tenant string) []string
		wantMsg string
	}{
		{"fails on an unknown feature", func(tenant string) []string {
			return []string{"feature", "activate", "UseQueueEventz", "--tenant", tenant}
		}, "UseQueueEventz"},
		{"fails on a feature name in the wrong case", func(tenant string) []string {
			return []string{"feature", "activate", "usequeueevents", "--tenant", tenant}
		}, "usequeueevents"},
		{"fails without a feature name", func(tenant string) []string {
			return []string{"feature", "activate", "--tenant", tenant}
		}, "arg"},
		{"fails for an unknown tenant", func(string) []string {
			return []string{"feature", "activate", "UseQueueEvents", "--tenant", "999999"}
		}, "999999"},
		{"fails without a tenant", func(string) []string {
			return []string{"feature", "deactivate", "UseQueueEvents"}
		}, "--tenant"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newCLI(t)
			tenant := e.mustTenant(t, "Acme")
			stderr := e.MustFail(t, tc.args(tenant)...)
			if !strings.Contains(stderr, tc.wantMsg) {
				t.Errorf("stderr %q does not mention %s", stderr, tc.wantMsg)
			}
			if n := e.count(t, &models.Feature{}); n != 0 {
				t.Errorf("%d features rows, want 0", n)
			}
		})
	}
}
