// Package jobs owns eventq's background tasks: for each, its type name, payload, constructor
// and handler live in one file so producer and consumer cannot drift apart. Handlers decode
// their task and call the package that does the work (payments, tracking).
package jobs

import (
	"context"
	"log/slog"

	"github.com/hibiken/asynq"

	"github.com/eventq/eventq/internal/delivery"
	"github.com/eventq/eventq/internal/payments"
	"github.com/eventq/eventq/internal/retention"
)

// Handlers holds what the task handlers need.
type Handlers struct {
	// Delivery re-pushes events whose queue append failed.
	Delivery *delivery.Service
	// Payments handles provider events and drains the webhook inbox.
	Payments Payments
	// Reconciler runs the periodic reconciliation; nil when no provider key is configured.
	Reconciler *payments.Reconciler
	// Retention runs the storage maintenance of the stored events.
	Retention *retention.Pruner
	// DeadLetters applies the dead letters' bounds to every tenant with the storage
	// maintenance; may be nil.
	DeadLetters DeadLetterPruner
	Log         *slog.Logger
}

// DeadLetterPruner drops the dead letters past their bounds of every tenant
// (*consume.Service is one).
type DeadLetterPruner interface {
	PruneDeadLetters(ctx context.Context) (int64, error)
}

// Payments is what the payment tasks need of the payment flow; *payments.Service is one.
type Payments interface {
	HandleEvent(ctx context.Context, payload []byte) (string, error)
	DrainInbox(ctx context.Context) error
}

// Register binds every task type to its handler on mux.
func Register(mux *asynq.ServeMux, h *Handlers) {
	mux.HandleFunc(TypeRequeueEvents, h.RequeueEvents)
	for _, eventType := range payments.HandledTypes() {
		mux.HandleFunc(EventTaskType(eventType), h.HandleProviderEvent)
	}
	mux.HandleFunc(TypeReconcile, h.Reconcile)
	mux.HandleFunc(TypeDrainInbox, h.DrainInbox)
	mux.HandleFunc(TypeMaintainEvents, h.MaintainEvents)
}
