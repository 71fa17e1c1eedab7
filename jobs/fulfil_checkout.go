package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stripe/stripe-go/v76"

	"github.com/eventq/eventq/internal/fulfil"
	"github.com/eventq/eventq/internal/psp"
)

// Task types of the provider events that fulfil a checkout.
const (
	TypeCheckoutCompleted             = "psp:" + psp.EventCheckoutCompleted
	TypeCheckoutAsyncPaymentSucceeded = "psp:" + psp.EventAsyncPaymentSucceeded
)

// FulfilCheckout handles both checkout task types: it fulfils the event's session through the
// shared fulfilment path. Sessions that can never be fulfilled are logged and not retried.
func (h *Handlers) FulfilCheckout(ctx context.Context, t *asynq.Task) error {
	var ev stripe.Event
	if err := json.Unmarshal(t.Payload(), &ev); err != nil || ev.Data == nil {
		return fmt.Errorf("fulfil checkout: payload is not an event: %w", asynq.SkipRetry)
	}
	var cs stripe.CheckoutSession
	if err := json.Unmarshal(ev.Data.Raw, &cs); err != nil || cs.ID == "" {
		return fmt.Errorf("fulfil checkout: event %s carries no checkout session: %w", ev.ID, asynq.SkipRetry)
	}
	res, err := h.Fulfil.Fulfil(ctx, SessionOf(&cs, ev.Account))
	if errors.Is(err, fulfil.ErrRejected) {
		h.Log.Warn("checkout not fulfilled", "event_id", ev.ID, "session_id", cs.ID, "reason", err.Error())
		return fmt.Errorf("%v: %w", err, asynq.SkipRetry)
	}
	if err != nil {
		return fmt.Errorf("fulfil checkout %s: %w", cs.ID, err)
	}
	h.Log.Info("checkout processed", "event_id", ev.ID, "session_id", cs.ID, "status", res.Status, "purchase_id", res.PurchaseID)
	return nil
}

// SessionOf converts a provider session on account to what fulfilment needs.
func SessionOf(cs *stripe.CheckoutSession, account string) fulfil.Session {
	s := fulfil.Session{
		ID: cs.ID, Account: account, PaymentStatus: string(cs.PaymentStatus),
		AmountTotal: cs.AmountTotal, Currency: string(cs.Currency), Metadata: cs.Metadata,
	}
	if cs.PaymentIntent != nil {
		s.PaymentIntent = cs.PaymentIntent.ID
	}
	return s
}

// RetryDelay is the back-off between attempts of a failed task: 1 s, 2 s, 4 s … capped at
// 5 minutes, plus up to 20% random jitter so retries of many tasks spread out.
func RetryDelay(n int, _ error, _ *asynq.Task) time.Duration {
	d := min(time.Second<<min(n, 9), 5*time.Minute)
	return d + rand.N(d/5+1)
}
