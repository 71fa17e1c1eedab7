package payments_test

import (
	"context"
	"testing"
	"time"

	"github.com/eventq/eventq/internal/payments"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/models"
)

// A payment completed for a member erased before it is recorded as a purchase, for the books,
// with the member's id, but grants no entitlement, and its purchase_completed event, stored
// and queued, names no member. On Postgres both ways of storing a fulfilment are tried.
func TestAPaymentAfterTheMembersErasureGrantsNothing(t *testing.T) {
	for _, inTx := range []bool{false, true} {
		name := "one statement on Postgres"
		if inTx {
			name = "a transaction"
		}
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, true)
			sh := e.MustShop(t, "acct_erased")
			now := time.Now().UTC()
			testenv.Must(t, e.DB.Model(&models.AudienceMember{}).Where("id = ?", sh.Member.ID).
				Updates(map[string]any{"erased_at": now, "email": "", "name": ""}).Error)

			fulfil := e.Svc.Fulfil
			if inTx {
				fulfil = e.Svc.FulfilInTransaction
			}
			res, err := fulfil(context.Background(), e.Session(sh))
			if err != nil || res.Status != payments.StatusFulfilled {
				t.Fatalf("Fulfil = %+v, %v", res, err)
			}
			var p models.Purchase
			testenv.Must(t, e.DB.Take(&p, res.PurchaseID).Error)
			if p.AudienceMemberID != sh.Member.ID {
				t.Fatalf("purchase of member %d, want %d", p.AudienceMemberID, sh.Member.ID)
			}
			var grants int64
			testenv.Must(t, e.DB.Model(&models.Entitlement{}).Where("tenant_id = ?", sh.Tenant.ID).Count(&grants).Error)
			if grants != 0 {
				t.Fatalf("%d entitlements granted to an erased member", grants)
			}
			var ev models.TrackedEvent
			testenv.Must(t, e.DB.Take(&ev, "tenant_id = ?", sh.Tenant.ID).Error)
			if ev.Type != payments.EventPurchaseCompleted || ev.AudienceMemberID != nil {
				t.Fatalf("stored event %s names %v", ev.Type, ev.AudienceMemberID)
			}
			pushed := e.Pusher.events()
			if len(pushed) != 1 || pushed[0].AudienceMemberID != nil {
				t.Fatalf("queued %+v, want one event naming no member", pushed)
			}
		})
	}
}
