package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/hibiken/asynq"
	"github.com/stripe/stripe-go/v76"

	"github.com/eventq/eventq/internal/fulfil"
	"github.com/eventq/eventq/internal/psp"
	"github.com/eventq/eventq/models"
)

// Task types of the provider events that end a purchase.
const (
	TypeChargeRefunded = "psp:" + psp.EventChargeRefunded
	TypeDisputeCreated = "psp:" + psp.EventDisputeCreated
)

// RevokePurchase handles charge.refunded and charge.dispute.created: a fully refunded or
// disputed charge ends its purchase (matched by payment intent) and revokes the entitlement,
// through fulfil.Revoke. A partial refund changes nothing. A charge whose purchase does not
// exist yet is parked and applied when it is fulfilled. Events that can never apply are
// logged and not retried.
func (h *Handlers) RevokePurchase(ctx context.Context, t *asynq.Task) error {
	var ev stripe.Event
	if err := json.Unmarshal(t.Payload(), &ev); err != nil || ev.Data == nil {
		return fmt.Errorf("revoke purchase: payload is not an event: %w", asynq.SkipRetry)
	}
	r, ok, err := ReversalOf(&ev)
	if err != nil {
		return fmt.Errorf("revoke purchase: %v: %w", err, asynq.SkipRetry)
	}
	if !ok {
		h.Fulfil.Ignored()
		h.Log.Info("partial refund ignored", "event_id", ev.ID)
		return nil
	}
	out, err := h.Fulfil.Revoke(ctx, r)
	if errors.Is(err, fulfil.ErrRejected) {
		h.Log.Warn("purchase not revoked", "event_id", ev.ID, "reason", err.Error())
		return fmt.Errorf("%v: %w", err, asynq.SkipRetry)
	}
	if err != nil {
		return fmt.Errorf("revoke purchase for %s: %w", r.PaymentIntent, err)
	}
	h.Log.Info("reversal processed", "event_id", ev.ID, "kind", r.Kind, "payment_intent", r.PaymentIntent, "outcome", out)
	return nil
}

// ReversalOf reads the reversal an event reports: ok is false for a charge that is not fully
// refunded (nothing to do). An error means the event can never apply.
func ReversalOf(ev *stripe.Event) (r fulfil.Reversal, ok bool, err error) {
	r = fulfil.Reversal{Account: ev.Account, EventID: ev.ID}
	switch string(ev.Type) {
	case psp.EventChargeRefunded:
		var ch stripe.Charge
		if err := json.Unmarshal(ev.Data.Raw, &ch); err != nil || ch.ID == "" {
			return r, false, fmt.Errorf("event %s carries no charge", ev.ID)
		}
		if !ch.Refunded && (ch.Amount == 0 || ch.AmountRefunded < ch.Amount) {
			return r, false, nil
		}
		r.Kind = models.PurchaseRefunded
		if ch.PaymentIntent != nil {
			r.PaymentIntent = ch.PaymentIntent.ID
		}
	case psp.EventDisputeCreated:
		var d stripe.Dispute
		if err := json.Unmarshal(ev.Data.Raw, &d); err != nil || d.ID == "" {
			return r, false, fmt.Errorf("event %s carries no dispute", ev.ID)
		}
		r.Kind = models.PurchaseDisputed
		if d.PaymentIntent != nil {
			r.PaymentIntent = d.PaymentIntent.ID
		}
	default:
		return r, false, fmt.Errorf("event %s: type %q is not a reversal", ev.ID, ev.Type)
	}
	if r.PaymentIntent == "" {
		return r, false, fmt.Errorf("event %s names no payment intent", ev.ID)
	}
	return r, true, nil
}
