package jobs

import (
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/eventq/eventq/internal/payments"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/models"
)

// fulfilled delivers a paid session of s and waits for its purchase.
func (e *env) fulfilled(t *testing.T, s shop) models.Purchase {
	t.Helper()
	cs, id, payload := e.PaidSession(t, s)
	e.Deliver(t, payload)
	e.WaitDone(t, id)
	var p models.Purchase
	testenv.Must(t, e.DB.Take(&p, "psp_checkout_session_id = ?", cs.ID).Error)
	if p.PSPPaymentIntentID == "" || *cs.PaymentIntent != p.PSPPaymentIntentID {
		t.Fatalf("purchase payment intent %q, session's %v", p.PSPPaymentIntentID, cs.PaymentIntent)
	}
	return p
}

// assertPurchase checks p's status, whether its entitlement is in force, and the queue.
func (e *env) assertPurchase(t *testing.T, p models.Purchase, status string, inForce bool, queue []string) {
	t.Helper()
	var got models.Purchase
	testenv.Must(t, e.DB.Take(&got, p.ID).Error)
	if got.Status != status {
		t.Errorf("purchase status %q, want %q", got.Status, status)
	}
	if n := e.Count(t, &models.Entitlement{}, "purchase_id = ?", p.ID); n != 1 {
		t.Errorf("%d entitlement rows, want 1", n)
	}
	if n := e.Count(t, &models.Entitlement{}, "purchase_id = ? AND revoked_at IS NULL", p.ID); (n == 1) != inForce {
		t.Errorf("entitlement in force: %v, want %v", n == 1, inForce)
	}
	if got := e.QueuedTypes(t, p.TenantID); !reflect.DeepEqual(got, queue) {
		t.Errorf("queue %v, want %v", got, queue)
	}
	var stored int64
	stored = e.Count(t, &models.TrackedEvent{}, "tenant_id = ?", p.TenantID)
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
		s := e.MustShop(t, "acct_refund")
		p := e.fulfilled(t, s)
		id, payload := e.PSP.Refund(s.Account, p.PSPPaymentIntentID, 1999, 1999)
		for i := 0; i < 3; i++ {
			e.Deliver(t, payload) // the same event redelivered
		}
		e.WaitDone(t, id)
		// Another charge.refunded event for the same payment (a later refund of a payment
		// already fully refunded), and a dispute after the refund: nothing more.
		id2, payload2 := e.PSP.Refund(s.Account, p.PSPPaymentIntentID, 1999, 1999)
		id3, payload3 := e.PSP.Dispute(s.Account, p.PSPPaymentIntentID, 1999)
		e.Deliver(t, payload2)
		e.Deliver(t, payload3)
		e.WaitDone(t, id2)
		e.WaitDone(t, id3)
		e.assertPurchase(t, p, models.PurchaseRefunded, false, refunded)
	})

	t.Run("a dispute revokes", func(t *testing.T) {
		s := e.MustShop(t, "acct_dispute")
		p := e.fulfilled(t, s)
		id, payload := e.PSP.Dispute(s.Account, p.PSPPaymentIntentID, 1999)
		e.Deliver(t, payload)
		e.WaitDone(t, id)
		e.assertPurchase(t, p, models.PurchaseDisputed, false, disputed)
	})

	t.Run("a partial refund changes nothing", func(t *testing.T) {
		s := e.MustShop(t, "acct_partial")
		p := e.fulfilled(t, s)
		id, payload := e.PSP.Refund(s.Account, p.PSPPaymentIntentID, 1999, 1000)
		e.Deliver(t, payload)
		e.WaitDone(t, id)
		e.assertPurchase(t, p, models.PurchasePaid, true, completed)
	})

	t.Run("a refund from another connected account changes nothing", func(t *testing.T) {
		s := e.MustShop(t, "acct_victim")
		p := e.fulfilled(t, s)
		_, payload := e.PSP.Refund("acct_attacker", p.PSPPaymentIntentID, 1999, 1999)
		e.Deliver(t, payload)
		e.assertPurchaseEventually(t, p)
		e.assertPurchase(t, p, models.PurchasePaid, true, completed)
	})

	t.Run("a refund before the fulfilment ends revoked", func(t *testing.T) {
		s := e.MustShop(t, "acct_early")
		cs, id, payload := e.PaidSession(t, s)
		rid, rpayload := e.PSP.Refund(s.Account, *cs.PaymentIntent, 1999, 1999)
		e.Deliver(t, rpayload)
		e.WaitDone(t, rid)
		if n := e.Count(t, &models.Purchase{}, "tenant_id = ?", s.Tenant.ID); n != 0 {
			t.Fatalf("%d purchases before the fulfilment", n)
		}
		e.Deliver(t, payload)
		e.WaitDone(t, id)
		var p models.Purchase
		testenv.Must(t, e.DB.Take(&p, "psp_checkout_session_id = ?", cs.ID).Error)
		e.assertPurchase(t, p, models.PurchaseRefunded, false, refunded)
	})

	t.Run("a refund racing the fulfilment ends revoked, once", func(t *testing.T) {
		for i := 0; i < 8; i++ {
			s := e.MustShop(t, fmt.Sprintf("acct_racing_%d", i))
			cs, id, payload := e.PaidSession(t, s)
			rid, rpayload := e.PSP.Refund(s.Account, *cs.PaymentIntent, 1999, 1999)
			var wg sync.WaitGroup
			for _, b := range [][]byte{payload, rpayload} {
				wg.Add(1)
				go func(b []byte) { defer wg.Done(); e.Deliver(t, b) }(b)
			}
			wg.Wait()
			e.WaitDone(t, id)
			e.WaitDone(t, rid)
			var p models.Purchase
			testenv.Must(t, e.DB.Take(&p, "psp_checkout_session_id = ?", cs.ID).Error)
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

// Tasks that the previous version queued, one task type per event type ("psp:charge.refunded",
// …), are still handled during an upgrade: the one provider-event handler is registered under
// each of those names.
func TestTasksOfThePreviousVersionAreHandled(t *testing.T) {
	e := startEnv(t)
	s := e.MustShop(t, "acct_upgrade")
	cs, id, payload := e.PaidSession(t, s)
	rid, rpayload := e.PSP.Refund(s.Account, *cs.PaymentIntent, 1999, 1999)
	for _, task := range []struct {
		typ, id string
		payload []byte
	}{{"psp:checkout.session.completed", id, payload}, {"psp:charge.refunded", rid, rpayload}} {
		_, err := e.Tasks.Enqueue(asynq.NewTask(task.typ, task.payload, asynq.TaskID(task.id), asynq.Retention(time.Hour)))
		testenv.Must(t, err)
		e.WaitDone(t, task.id)
	}
	var p models.Purchase
	testenv.Must(t, e.DB.Take(&p, "psp_checkout_session_id = ?", cs.ID).Error)
	e.assertPurchase(t, p, models.PurchaseRefunded, false, refunded)
}
