package payments_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/eventq/eventq/internal/payments"
	"github.com/eventq/eventq/internal/psp"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/models"
)

func TestRevoke(t *testing.T) {
	e := newEnv(t, true)
	ctx := context.Background()
	// fulfilled returns a fulfilled paid session of a new shop on account.
	fulfilled := func(t *testing.T, account string) payments.Session {
		t.Helper()
		s := e.Session(e.MustShop(t, account))
		if _, err := e.Svc.Fulfil(ctx, s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	status := func(t *testing.T, s payments.Session) (string, int64) {
		t.Helper()
		var p models.Purchase
		testenv.Must(t, e.DB.Take(&p, "psp_checkout_session_id = ?", s.ID).Error)
		return p.Status, e.Count(t, &models.Entitlement{}, "purchase_id = ? AND revoked_at IS NULL", p.ID)
	}
	cases := []struct {
		name string
		// edit turns the full refund of a fulfilled session's payment into the reversal under test.
		edit    func(r *payments.Reversal)
		outcome string // "" for a rejected reversal
		status  string // the purchase's status afterwards
	}{
		{"a full refund ends the purchase", func(*payments.Reversal) {}, payments.RevokeApplied, models.PurchaseRefunded},
		{"a dispute ends the purchase", func(r *payments.Reversal) { r.Kind = models.PurchaseDisputed }, payments.RevokeApplied, models.PurchaseDisputed},
		{"a refund from another account is rejected", func(r *payments.Reversal) { r.Account = "acct_attacker" }, "", models.PurchasePaid},
		{"a refund without payment intent is rejected", func(r *payments.Reversal) { r.PaymentIntent = "" }, "", models.PurchasePaid},
		{"an unknown kind is rejected", func(r *payments.Reversal) { r.Kind = "chargeback" }, "", models.PurchasePaid},
		{"a refund of a payment without purchase is parked", func(r *payments.Reversal) { r.PaymentIntent = "pi_unknown" }, payments.RevokeParked, models.PurchasePaid},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := fulfilled(t, fmt.Sprintf("acct_revoke_%d", i))
			r := payments.Reversal{Kind: models.PurchaseRefunded, PaymentIntent: s.PaymentIntent, Account: s.Account, EventID: psp.NewID("evt")}
			tc.edit(&r)
			out, err := e.Svc.Revoke(ctx, r)
			if tc.outcome == "" {
				if !errors.Is(err, payments.ErrRejected) {
					t.Fatalf("Revoke = %q, %v; want an error wrapping ErrRejected", out, err)
				}
			} else if err != nil || out != tc.outcome {
				t.Fatalf("Revoke = %q, %v; want %s", out, err, tc.outcome)
			}
			got, inForce := status(t, s)
			if got != tc.status || (inForce == 1) != (tc.status == models.PurchasePaid) {
				t.Errorf("purchase %s with %d entitlements in force, want %s", got, inForce, tc.status)
			}
		})
	}

	t.Run("a second reversal changes nothing", func(t *testing.T) {
		s := fulfilled(t, "acct_revoke_twice")
		r := payments.Reversal{Kind: models.PurchaseRefunded, PaymentIntent: s.PaymentIntent, Account: s.Account, EventID: "evt_1"}
		pushed := len(e.Pusher.types())
		for i, want := range []string{payments.RevokeApplied, payments.RevokeAlready} {
			if out, err := e.Svc.Revoke(ctx, r); err != nil || out != want {
				t.Fatalf("call %d: Revoke = %q, %v; want %s", i, out, err, want)
			}
		}
		r.Kind, r.EventID = models.PurchaseDisputed, "evt_2"
		if out, err := e.Svc.Revoke(ctx, r); err != nil || out != payments.RevokeAlready {
			t.Fatalf("dispute after refund: Revoke = %q, %v; want %s", out, err, payments.RevokeAlready)
		}
		if got := e.Pusher.types()[pushed:]; !reflect.DeepEqual(got, []string{payments.EventPurchaseRefunded}) {
			t.Errorf("pushed %v, want one purchase_refunded", got)
		}
	})
	t.Run("a parked refund is applied by the fulfilment", func(t *testing.T) {
		s := e.Session(e.MustShop(t, "acct_revoke_early"))
		r := payments.Reversal{Kind: models.PurchaseRefunded, PaymentIntent: s.PaymentIntent, Account: s.Account, EventID: "evt_3"}
		if out, err := e.Svc.Revoke(ctx, r); err != nil || out != payments.RevokeParked {
			t.Fatalf("Revoke = %q, %v; want parked", out, err)
		}
		pushed := len(e.Pusher.types())
		if res, err := e.Svc.Fulfil(ctx, s); err != nil || res.Status != payments.StatusFulfilled {
			t.Fatalf("Fulfil = %+v, %v", res, err)
		}
		if got, inForce := status(t, s); got != models.PurchaseRefunded || inForce != 0 {
			t.Errorf("purchase %s with %d entitlements in force, want refunded and none", got, inForce)
		}
		want := []string{payments.EventPurchaseCompleted, payments.EventPurchaseRefunded}
		if got := e.Pusher.types()[pushed:]; !reflect.DeepEqual(got, want) {
			t.Errorf("pushed %v, want %v", got, want)
		}
	})

	t.Run("a refund applied before the fulfilment's append keeps the queue's order", func(t *testing.T) {
		s := e.Session(e.MustShop(t, "acct_revoke_between"))
		r := payments.Reversal{Kind: models.PurchaseRefunded, PaymentIntent: s.PaymentIntent, Account: s.Account, EventID: "evt_4"}
		pushed := len(e.Pusher.types())
		// The refund runs once the fulfilment has committed and before it appends its event.
		e.Pusher.mu.Lock()
		e.Pusher.before = func() {
			if out, err := e.Svc.Revoke(ctx, r); err != nil || out != payments.RevokeApplied {
				t.Errorf("Revoke = %q, %v; want %s", out, err, payments.RevokeApplied)
			}
		}
		e.Pusher.mu.Unlock()
		if res, err := e.Svc.Fulfil(ctx, s); err != nil || res.Status != payments.StatusFulfilled {
			t.Fatalf("Fulfil = %+v, %v", res, err)
		}
		want := []string{payments.EventPurchaseCompleted, payments.EventPurchaseRefunded}
		if got := e.Pusher.types()[pushed:]; !reflect.DeepEqual(got, want) {
			t.Errorf("pushed %v, want %v", got, want)
		}
	})
}
