package purchases_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/eventq/eventq/internal/apperr"
	"github.com/eventq/eventq/internal/clock"
	"github.com/eventq/eventq/internal/purchases"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/models"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// The entitlement check answers an entitlement in force to the product, and none once it is
// revoked (without a change feed nothing is cached); a purchase is its tenant's only.
func TestTheCheckAnswersEntitlementsInForce(t *testing.T) {
	db, _ := testenv.DB(t)
	ctx := context.Background()
	svc := purchases.New(db, clock.Real{}, nil)
	sh := testenv.MustShop(t, db, "", false)
	other := testenv.MustTenant(t, db, false).ID
	now := time.Now().UTC()
	p := models.Purchase{TenantID: sh.ID, AudienceMemberID: sh.Member.ID, ProductID: sh.Product.ID, PSPCheckoutSessionID: "cs_1",
		AmountTotal: 100, Currency: "eur", Status: models.PurchasePaid, CreatedAt: now, UpdatedAt: now}
	testenv.Must(t, db.Create(&p).Error)
	e := models.Entitlement{TenantID: sh.ID, AudienceMemberID: sh.Member.ID, ProductID: sh.Product.ID, PurchaseID: p.ID, CreatedAt: now, UpdatedAt: now}
	testenv.Must(t, db.Create(&e).Error)

	got, err := svc.Check(ctx, sh.ID, sh.Member.ID, sh.Product.ID)
	if err != nil || got == nil || got.ID != e.ID {
		t.Fatalf("Check = %+v, %v; want entitlement %d", got, err, e.ID)
	}
	if got, err := svc.Check(ctx, sh.ID, sh.Member.ID, sh.Product.ID+1); err != nil || got != nil {
		t.Errorf("another product: %+v, %v; want none", got, err)
	}
	testenv.Must(t, db.Model(&e).Update("revoked_at", now).Error)
	if got, err := svc.Check(ctx, sh.ID, sh.Member.ID, sh.Product.ID); err != nil || got != nil {
		t.Errorf("after the revocation: %+v, %v; want none", got, err)
	}
	if all, err := svc.Granted(ctx, sh.ID, sh.Member.ID); err != nil || len(all) != 1 || all[0].RevokedAt == nil {
		t.Errorf("Granted = %+v, %v; want the revoked one listed", all, err)
	}
	if _, err := svc.Get(ctx, other, p.ID); !errors.Is(err, apperr.ErrNotFound) {
		t.Errorf("another tenant's Get = %v, want ErrNotFound", err)
	}
}
