package jobs

import (
	"reflect"
	"sync"
	"testing"

	"github.com/eventq/eventq/internal/payments"
	"github.com/eventq/eventq/models"
)

// fulfilled delivers a paid session of s and waits for its purchase.
func (e *env) fulfilled(s shop) models.Purchase {
	e.t.Helper()
	cs, id, payload := e.PaidSession(s)
	e.Deliver(payload)
	e.WaitDone(id)
	var p models.Purchase
	must(e.t, e.DB.Take(&p, "psp_checkout_session_id = ?", cs.ID).Error)
	if p.PSPPaymentIntentID == "" || *cs.PaymentIntent != p.PSPPaymentIntentID {
		e.t.Fatalf("purchase payment intent %q, session's %v", p.PSPPaymentIntentID, cs.PaymentIntent)
	}
	return p
}

// assertPurchase checks p's status, whether its entitlement is in force, and the queue.
func (e *env) assertPurchase(t *testing.T, p models.Purchase, status string, inForce bool, queue []string) {
	t.Helper()
	var got models.Purchase
	must(t, e.DB.Take(&got, p.ID).Error)
	if got.Status != status {
		t.Errorf("purchase status %q, want %q", got.Status, status)
	}
	if n := e.Count(&models.Entitlement{}, "purchase_id = ?", p.ID); n != 1 {
		t.Errorf("%d entitlement rows, want 1", n)
	}
	if n := e.Count(&models.Entitlement{}, "purchase_id = ? AND revoked_at IS NULL", p.ID); (n == 1) != inForce {
		t.Errorf("entitlement in force: %v, want %v", n == 1, inForce)
	}
	if got := e.QueuedTypes(p.TenantID); !reflect.DeepEqual(got, queue) {
		t.Errorf("queue %v, want %v", got, queue)
	}
	var stored int64
	stored = e.Count(&models.TrackedEvent{}, "tenant_id = ?", p.TenantID)
	if stored != int64(len(queue)) {
		t.Errorf("%d stored events, want %d", stored, len(queue))
	}
}

var (
	completed = []string{payments.EventPurchaseCompleted}
	refunded  = []string{payments.EventPurchaseCompleted, payments.EventPurchaseRefunded}
	disputed  = []string{payments.EventPurchaseCompleted, payments.EventPurchaseDisputed}
)

func TestRefundsAndDisputesRevoke(t *testing.T) {
	e := startEnv(t)

	t.Run("a full refund revokes once, however often it arrives", func(t *testing.T) {
		s := e.MustShop("acct_refund")
		p := e.fulfilled(s)
		id, payload := e.PSP.Refund(s.Account, p.PSPPaymentIntentID, 1999, 1999)
		for i := 0; i < 3; i++ {
			e.Deliver(payload) // the same event redelivered
		}
		e.WaitDone(id)
		// Another charge.refunded event for the same payment (a later refund of a payment
		// already fully refunded), and a dispute after the refund: nothing more.
		id2, payload2 := e.PSP.Refund(s.Account, p.PSPPaymentIntentID, 1999, 1999)
		id3, payload3 := e.PSP.Dispute(s.Account, p.PSPPaymentIntentID, 1999)
		e.Deliver(payload2)
		e.Deliver(payload3)
		e.WaitDone(id2)
		e.WaitDone(id3)
		e.assertPurchase(t, p, models.PurchaseRefunded, false, refunded)
	})

	t.Run("a dispute revokes", func(t *testing.T) {
		s := e.MustShop("acct_dispute")
		p := e.fulfilled(s)
		id, payload := e.PSP.Dispute(s.Account, p.PSPPaymentIntentID, 1999)
		e.Deliver(payload)
		e.WaitDone(id)
		e.assertPurchase(t, p, models.PurchaseDisputed, false, disputed)
	})

	t.Run("a partial refund changes nothing", func(t *testing.T) {
		s := e.MustShop("acct_partial")
		p := e.fulfilled(s)
		id, payload := e.PSP.Refund(s.Account, p.PSPPaymentIntentID, 1999, 1000)
		e.Deliver(payload)
		e.WaitDone(id)
		e.assertPurchase(t, p, models.PurchasePaid, true, completed)
	})

	t.Run("a refund from another connected account changes nothing", func(t *testing.T) {
		s := e.MustShop("acct_victim")
		p := e.fulfilled(s)
		_, payload := e.PSP.Refund("acct_attacker", p.PSPPaymentIntentID, 1999, 1999)
		e.Deliver(payload)
		e.assertPurchaseEventually(t, p)
		e.assertPurchase(t, p, models.PurchasePaid, true, completed)
	})

	t.Run("a refund before the fulfilment ends revoked", func(t *testing.T) {
		s := e.MustShop("acct_early")
		cs, id, payload := e.PaidSession(s)
		rid, rpayload := e.PSP.Refund(s.Account, *cs.PaymentIntent, 1999, 1999)
		e.Deliver(rpayload)
		e.WaitDone(rid)
		if n := e.Count(&models.Purchase{}, "tenant_id = ?", s.Tenant.ID); n != 0 {
			t.Fatalf("%d purchases before the fulfilment", n)
		}
		e.Deliver(payload)
		e.WaitDone(id)
		var p models.Purchase
		must(t, e.DB.Take(&p, "psp_checkout_session_id = ?", cs.ID).Error)
		e.assertPurchase(t, p, models.PurchaseRefunded, false, refunded)
	})

	t.Run("a refund racing the fulfilment ends revoked, once", func(t *testing.T) {
		for i := 0; i < 8; i++ {
			s := e.MustShop("acct_racing")
			cs, id, payload := e.PaidSession(s)
			rid, rpayload := e.PSP.Refund(s.Account, *cs.PaymentIntent, 1999, 1999)
			var wg sync.WaitGroup
			for _, b := range [][]byte{payload, rpayload} {
				wg.Add(1)
				go func(b []byte) { defer wg.Done(); e.Deliver(b) }(b)
			}
			wg.Wait()
			e.WaitDone(id)
			e.WaitDone(rid)
			var p models.Purchase
			must(t, e.DB.Take(&p, "psp_checkout_session_id = ?", cs.ID).Error)
			e.assertPurchase(t, p, models.PurchaseRefunded, false, refunded)
		}
	})
}

// assertPurchaseEventually waits until every queued task has finished, so that a revocation
// that would wrongly happen has happened.
func (e *env) assertPurchaseEventually(t *testing.T, _ models.Purchase) {
	t.Helper()
	testenvEventually(t, func() bool {
		info, err := e.Inspect.GetQueueInfo("default")
		return err == nil && info.Pending == 0 && info.Active == 0 && info.Retry == 0
	})
}
