package payments_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stripe/stripe-go/v76"

	"github.com/eventq/eventq/internal/metrics"
	"github.com/eventq/eventq/internal/payments"
	"github.com/eventq/eventq/internal/psp"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/models"
)

func TestHandleEvent(t *testing.T) {
	e := newEnv(t, true)
	e.Svc.Metrics = metrics.New()
	ctx := context.Background()
	charge := func(amount, refunded int64, full bool) func(pi string) any {
		return func(pi string) any {
			return psp.ChargeObject{ID: "ch_1", Object: "charge", Amount: amount, AmountRefunded: refunded, Currency: "usd", PaymentIntent: pi, Refunded: full}
		}
	}
	fixed := func(object any) func(string) any { return func(string) any { return object } }
	cases := []struct {
		name      string
		eventType stripe.EventType
		object    func(pi string) any // the event's data.object, for a purchase paid with pi
		outcome   string              // "" for a rejected event
		status    string              // the purchase's status afterwards
	}{
		{"a full refund ends the purchase", stripe.EventTypeChargeRefunded, charge(1999, 1999, true), payments.RevokeApplied, models.PurchaseRefunded},
		{"a refund of the whole amount not flagged refunded ends it", stripe.EventTypeChargeRefunded, charge(1999, 1999, false), payments.RevokeApplied, models.PurchaseRefunded},
		{"a partial refund is ignored", stripe.EventTypeChargeRefunded, charge(1999, 500, false), payments.OutcomeIgnored, models.PurchasePaid},
		{"a dispute ends the purchase", stripe.EventTypeChargeDisputeCreated, func(pi string) any {
			return psp.DisputeObject{ID: "dp_1", Object: "dispute", Amount: 1999, Charge: "ch_1", PaymentIntent: pi}
		}, payments.RevokeApplied, models.PurchaseDisputed},
		{"a refund without payment intent is rejected", stripe.EventTypeChargeRefunded, func(string) any { return charge(1999, 1999, true)("") }, "", models.PurchasePaid},
		{"a refund whose payment intent is missing is rejected", stripe.EventTypeChargeRefunded,
			fixed(map[string]any{"id": "ch_1", "object": "charge", "amount": 1999, "amount_refunded": 1999, "refunded": true}), "", models.PurchasePaid},
		{"a dispute without payment intent is rejected", stripe.EventTypeChargeDisputeCreated, fixed(psp.DisputeObject{ID: "dp_1", Amount: 1999}), "", models.PurchasePaid},
		{"a refund event without a charge is rejected", stripe.EventTypeChargeRefunded, fixed(map[string]any{"object": "charge"}), "", models.PurchasePaid},
		{"a dispute event without a dispute is rejected", stripe.EventTypeChargeDisputeCreated, fixed(map[string]any{"object": "dispute"}), "", models.PurchasePaid},
		{"a checkout event without a session is rejected", stripe.EventTypeCheckoutSessionCompleted, fixed(map[string]any{"object": "checkout.session"}), "", models.PurchasePaid},
		{"an unhandled type is rejected", "charge.refund.updated", charge(1999, 1999, true), "", models.PurchasePaid},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := e.Session(e.MustShop(t, fmt.Sprintf("acct_handle_%d", i)))
			if _, err := e.Svc.Fulfil(ctx, s); err != nil {
				t.Fatal(err)
			}
			_, payload := psp.NewObjectEvent(tc.eventType, s.Account, tc.object(s.PaymentIntent), time.Now())
			ignored := testutil.ToFloat64(e.Svc.Metrics.Revocations.WithLabelValues(payments.OutcomeIgnored))

			out, err := e.Svc.HandleEvent(ctx, payload)
			if tc.outcome == "" {
				if !errors.Is(err, payments.ErrRejected) {
					t.Fatalf("HandleEvent = %q, %v; want an error wrapping ErrRejected", out, err)
				}
			} else if err != nil || out != tc.outcome {
				t.Fatalf("HandleEvent = %q, %v; want %s", out, err, tc.outcome)
			}
			var p models.Purchase
			testenv.Must(t, e.DB.Take(&p, "psp_checkout_session_id = ?", s.ID).Error)
			inForce := e.Count(t, &models.Entitlement{}, "purchase_id = ? AND revoked_at IS NULL", p.ID)
			if p.Status != tc.status || (inForce == 1) != (tc.status == models.PurchasePaid) {
				t.Errorf("purchase %s with %d entitlements in force, want %s", p.Status, inForce, tc.status)
			}
			wantIgnored := ignored
			if tc.outcome == payments.OutcomeIgnored {
				wantIgnored++
			}
			if got := testutil.ToFloat64(e.Svc.Metrics.Revocations.WithLabelValues(payments.OutcomeIgnored)); got != wantIgnored {
				t.Errorf("ignored revocations counted %v, want %v", got, wantIgnored)
			}
		})
	}

	t.Run("a paid checkout is fulfilled once", func(t *testing.T) {
		sh := e.MustShop(t, "acct_handle_checkout")
		pi := psp.NewID("pi")
		cs := psp.SessionObject{
			ID: psp.NewID("cs_test"), AmountTotal: 1999, Currency: "usd", PaymentIntent: &pi, PaymentStatus: "paid",
			Metadata: payments.Metadata(sh.Tenant.ID, sh.Member.ID, sh.Product.ID),
		}
		for i, d := range []struct {
			typ  stripe.EventType
			want string
		}{
			{stripe.EventTypeCheckoutSessionCompleted, payments.StatusFulfilled},
			{stripe.EventTypeCheckoutSessionCompleted, payments.StatusAlreadyFulfilled},
			{stripe.EventTypeCheckoutSessionAsyncPaymentSucceeded, payments.StatusAlreadyFulfilled},
		} {
			_, payload := psp.NewEvent(d.typ, sh.Account, cs, time.Now())
			if out, err := e.Svc.HandleEvent(ctx, payload); err != nil || out != d.want {
				t.Fatalf("delivery %d (%s): HandleEvent = %q, %v; want %s", i, d.typ, out, err, d.want)
			}
		}
		if n := e.Count(t, &models.Purchase{}, "psp_checkout_session_id = ?", cs.ID); n != 1 {
			t.Errorf("%d purchases, want 1", n)
		}
	})

	t.Run("a refund from another connected account is rejected", func(t *testing.T) {
		s := e.Session(e.MustShop(t, "acct_handle_victim"))
		if _, err := e.Svc.Fulfil(ctx, s); err != nil {
			t.Fatal(err)
		}
		_, payload := psp.NewObjectEvent(stripe.EventTypeChargeRefunded, "acct_attacker", charge(1999, 1999, true)(s.PaymentIntent), time.Now())
		if out, err := e.Svc.HandleEvent(ctx, payload); !errors.Is(err, payments.ErrRejected) {
			t.Fatalf("HandleEvent = %q, %v; want an error wrapping ErrRejected", out, err)
		}
	})

	t.Run("a payload that is not an event is rejected", func(t *testing.T) {
		for _, payload := range []string{"", "not json", `{"id":"evt_1","type":"charge.refunded"}`, `[1]`} {
			if out, err := e.Svc.HandleEvent(ctx, []byte(payload)); !errors.Is(err, payments.ErrRejected) {
				t.Errorf("%q: HandleEvent = %q, %v; want an error wrapping ErrRejected", payload, out, err)
			}
		}
	})
}
