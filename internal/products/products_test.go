package products_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/eventq/eventq/internal/apperr"
	"github.com/eventq/eventq/internal/clock"
	"github.com/eventq/eventq/internal/paginate"
	"github.com/eventq/eventq/internal/products"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/models"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// A product belongs to its tenant: another tenant's id is Not Found; its amount and currency
// are fixed once created, its name and active flag change; the list filters on active.
func TestProductsAreTheirTenants(t *testing.T) {
	db, _ := testenv.DB(t)
	ctx := context.Background()
	svc := products.New(db, clock.Real{})
	a, b := testenv.MustTenant(t, db, false).ID, testenv.MustTenant(t, db, false).ID

	p, err := svc.Create(ctx, a, map[string]any{"name": "Course", "amount": json.Number("1999"), "currency": "eur"})
	testenv.Must(t, err)
	if p.Currency != "eur" || p.Amount != 1999 || !p.Active {
		t.Fatalf("created %+v", p)
	}
	for _, in := range []map[string]any{{"name": "x", "amount": json.Number("-1"), "currency": "eur"}, {"name": "x", "amount": json.Number("1")}} {
		if _, err := svc.Create(ctx, a, in); err == nil {
			t.Errorf("Create(%v) accepted", in)
		}
	}
	id := models.FormatID(p.ID)
	if _, err := svc.Update(ctx, a, id, map[string]any{"amount": json.Number("5")}); err == nil {
		t.Error("the amount changed")
	}
	up, err := svc.Update(ctx, a, id, map[string]any{"name": "Course 2", "active": false})
	testenv.Must(t, err)
	if up.Name != "Course 2" || up.Active || up.Amount != 1999 {
		t.Errorf("updated %+v; want the name and active changed, the amount kept", up)
	}
	if _, err := svc.Get(ctx, b, id); !errors.Is(err, apperr.ErrNotFound) {
		t.Errorf("another tenant's Get = %v, want ErrNotFound", err)
	}
	active := true
	page, err := svc.List(ctx, a, &active, paginate.Request{PerPage: 10})
	testenv.Must(t, err)
	if len(page.Items) != 0 {
		t.Errorf("%d active products listed, want none", len(page.Items))
	}
}
