package jobs

import (
	"context"
	"errors"
	"fmt"

	"github.com/hibiken/asynq"

	"github.com/eventq/eventq/internal/payments"
	"github.com/eventq/eventq/internal/psp"
)

// Task types of the provider events that end a purchase.
const (
	TypeChargeRefunded = "psp:" + psp.EventChargeRefunded
	TypeDisputeCreated = "psp:" + psp.EventDisputeCreated
)

// RevokePurchase handles charge.refunded and charge.dispute.created: a fully refunded or
// disputed charge ends its purchase (matched by payment intent) and revokes the entitlement,
// through payments.Service.Revoke. A partial refund changes nothing. A charge whose purchase
// does not exist yet is parked and applied when it is fulfilled. Events that can never apply
// are logged and not retried.
func (h *Handlers) RevokePurchase(ctx context.Context, t *asynq.Task) error {
	ev, err := eventOf(t, "revoke purchase")
	if err != nil {
		return err
	}
	r, ok, err := payments.ReversalOf(&ev)
	if err != nil {
		return fmt.Errorf("revoke purchase: %v: %w", err, asynq.SkipRetry)
	}
	if !ok {
		h.Payments.Ignored()
		h.Log.Info("partial refund ignored", "event_id", ev.ID)
		return nil
	}
	out, err := h.Payments.Revoke(ctx, r)
	if errors.Is(err, payments.ErrRejected) {
		h.Log.Warn("purchase not revoked", "event_id", ev.ID, "reason", err.Error())
		return fmt.Errorf("%v: %w", err, asynq.SkipRetry)
	}
	if err != nil {
		return fmt.Errorf("revoke purchase for %s: %w", r.PaymentIntent, err)
	}
	h.Log.Info("reversal processed", "event_id", ev.ID, "kind", r.Kind, "payment_intent", r.PaymentIntent, "outcome", out)
	return nil
}
