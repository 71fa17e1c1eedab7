package jobs

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/hibiken/asynq"

	"github.com/eventq/eventq/internal/payments"
	"github.com/eventq/eventq/internal/psp"
)

// Task types of the provider events that fulfil a checkout.
const (
	TypeCheckoutCompleted             = "psp:" + psp.EventCheckoutCompleted
	TypeCheckoutAsyncPaymentSucceeded = "psp:" + psp.EventAsyncPaymentSucceeded
)

// FulfilCheckout handles both checkout task types: it fulfils the event's session through
// payments.Service.Fulfil. Sessions that can never be fulfilled are logged and not retried.
func (h *Handlers) FulfilCheckout(ctx context.Context, t *asynq.Task) error {
	ev, err := eventOf(t, "fulfil checkout")
	if err != nil {
		return err
	}
	s, err := payments.SessionOfEvent(&ev)
	if err != nil {
		return fmt.Errorf("fulfil checkout: %v: %w", err, asynq.SkipRetry)
	}
	res, err := h.Payments.Fulfil(ctx, s)
	if errors.Is(err, payments.ErrRejected) {
		h.Log.Warn("checkout not fulfilled", "event_id", ev.ID, "session_id", s.ID, "reason", err.Error())
		return fmt.Errorf("%v: %w", err, asynq.SkipRetry)
	}
	if err != nil {
		return fmt.Errorf("fulfil checkout %s: %w", s.ID, err)
	}
	h.Log.Info("checkout processed", "event_id", ev.ID, "session_id", s.ID, "status", res.Status, "purchase_id", res.PurchaseID)
	return nil
}

// RetryDelay is the back-off between attempts of a failed task: 1 s, 2 s, 4 s … capped at
// 5 minutes, plus up to 20% random jitter so retries of many tasks spread out.
func RetryDelay(n int, _ error, _ *asynq.Task) time.Duration {
	d := min(time.Second<<min(n, 9), 5*time.Minute)
	return d + rand.N(d/5+1)
}
