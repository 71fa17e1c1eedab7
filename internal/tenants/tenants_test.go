package tenants_test

import (
	"context"
	"errors"
	"testing"

	"github.com/eventq/eventq/internal/apperr"
	"github.com/eventq/eventq/internal/clock"
	"github.com/eventq/eventq/internal/features"
	"github.com/eventq/eventq/internal/tenants"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/models"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// A tenant is created with its lists kept in their normal form, once each; bad input is 422
// with Laravel's messages and stores nothing; a rotated site key replaces the old one.
func TestTenantsAreCreatedUpdatedAndRotated(t *testing.T) {
	db, _ := testenv.DB(t)
	ctx := context.Background()
	svc := tenants.New(db, features.New(db, clock.Real{}), clock.Real{})

	tn, err := svc.Create(ctx, map[string]any{"name": "Shop", "allowed_hostnames": []any{"*.Shop.Example.", "shop.example"},
		"redact_query_params": []any{"email", "email"}})
	testenv.Must(t, err)
	if tn.SiteKey == "" || len(tn.AllowedHostnames) != 1 || tn.AllowedHostnames[0] != "shop.example" || len(tn.RedactQueryParams) != 1 {
		t.Fatalf("created %+v", tn)
	}
	var n int64
	for _, in := range []map[string]any{{}, {"name": nil}, {"name": "x", "psp_account_id": "not-an-account"}} {
		_, err := svc.Create(ctx, in)
		var ae *apperr.Error
		if !errors.As(err, &ae) || ae.Code != apperr.Invalid {
			t.Errorf("Create(%v) = %v, want a 422", in, err)
		}
	}
	testenv.Must(t, db.Model(&models.Tenant{}).Count(&n).Error)
	if n != 1 {
		t.Fatalf("%d tenants stored, want only the valid one", n)
	}

	up, err := svc.Update(ctx, tn.ID, map[string]any{"allowed_hostnames": nil})
	testenv.Must(t, err)
	if len(up.AllowedHostnames) != 0 || up.Name != "Shop" {
		t.Errorf("null emptied %+v; want the list empty, the name kept", up)
	}
	old := tn.SiteKey
	rot, err := svc.RotateSiteKey(ctx, tn.ID)
	testenv.Must(t, err)
	got, err := svc.Get(ctx, tn.ID)
	testenv.Must(t, err)
	if rot.SiteKey == old || got.SiteKey != rot.SiteKey {
		t.Errorf("site key %q → %q, stored %q", old, rot.SiteKey, got.SiteKey)
	}
	for _, id := range []uint64{0, tn.ID + 1} {
		if _, err := svc.Get(ctx, id); !errors.Is(err, apperr.ErrNotFound) {
			t.Errorf("Get(%d) = %v, want ErrNotFound", id, err)
		}
	}
}
