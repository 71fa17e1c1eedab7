// Package payments is eventq's checkout and payment flow, in one place: creating a Checkout
// Session, the return page, turning a verified webhook delivery into a worker task (or an inbox
// row when Redis is down), doing what a provider event means (HandleEvent: fulfilling a paid
// session exactly once, ending a purchase on a full refund or a dispute), and reconciling with
// the provider's event list. The provider event types it handles are one list (events.go).
//
// It knows one session type, Session, made from the provider's session by SessionOf. It talks
// to the provider through internal/psp and hands events to the worker through EventTasks, which
// package jobs implements on asynq, so it imports neither jobs nor asynq. Callers translate its
// results: routes into HTTP, jobs into task outcomes.
package payments

import (
	"context"
	"errors"
	"log/slog"

	"gorm.io/gorm"

	"github.com/eventq/eventq/internal/changes"
	"github.com/eventq/eventq/internal/clock"
	"github.com/eventq/eventq/internal/eventstore"
	"github.com/eventq/eventq/internal/features"
	"github.com/eventq/eventq/internal/metrics"
	"github.com/eventq/eventq/internal/psp"
	"github.com/eventq/eventq/models"
)

// Service runs the payment flow. A field whose comment names the methods that need it may be
// nil in a Service that never calls them (app builds every field; a test may leave Webhooks
// out); the others are
// required, except Metrics. A Service is safe for concurrent use, across processes too (the
// database decides every race).
type Service struct {
	DB *gorm.DB
	// Events stores the events fulfilment and revocation record.
	Events *eventstore.Store
	// PSP calls the provider's API; CreateCheckout and Return need it.
	PSP *psp.Client
	// Webhooks verifies webhook signatures; only Receive needs it.
	Webhooks *psp.Verifier
	// Queue hands verified events to the worker; Receive and DrainInbox need it.
	Queue EventTasks
	// Queueing says which tenants' events are queued (UseQueueEvents).
	Queueing features.Queueing
	// Ingest appends the events fulfilment and revocation store to the tenant's queue.
	Ingest Pusher
	// Clock stamps purchases, entitlements and reversals.
	Clock clock.Clock
	// AppURL is the public base URL, without a trailing slash: it starts the return page's URL.
	AppURL string
	Log    *slog.Logger
	// Metrics counts fulfilment and revocation outcomes; may be nil.
	Metrics *metrics.Metrics

	// Returns throttles the return page's provider calls per session; nil asks the provider
	// on every visit.
	Returns *Returns

	// Changes hears of every grant and revocation once committed, so that the api processes'
	// caches of entitlements drop the member's; nil announces nothing.
	Changes Announcer
}

// Announcer is where grants and revocations are announced (changes.Feed).
type Announcer interface {
	Announce(ctx context.Context, c changes.Change) error
}

// announce tells the api processes that member's entitlements changed. Its error is the
// caller's: a job retries, and its retry announces again.
func (svc *Service) announce(ctx context.Context, tenantID, member uint64) error {
	if svc.Changes == nil {
		return nil
	}
	return svc.Changes.Announce(ctx, changes.Change{Kind: changes.Entitlements, Tenant: tenantID, ID: member})
}

// Pusher appends committed events marked pending to their tenant's queue (and clears their
// marks); delivery.Service is one. Fulfilment needs nothing else of delivery.
type Pusher interface {
	PushPending(ctx context.Context, tenantID uint64, rows []models.TrackedEvent)
}

// EventTasks hands a verified provider event to the worker as the task that handles it, under
// the event's id, so that whoever enqueues an event (webhook, inbox drain, reconciliation), it
// is queued once. Package jobs implements it on asynq; only events of a type the flow handles
// (Handles) and with an id are given to it.
type EventTasks interface {
	// Enqueue queues the task of event eventID of eventType whose JSON is payload. It returns
	// an error wrapping ErrAlreadyQueued when a task with that id exists (success: the event is
	// queued).
	Enqueue(ctx context.Context, eventID, eventType string, payload []byte) error
}

// ErrAlreadyQueued is what EventTasks.Enqueue returns for an event queued before.
var ErrAlreadyQueued = errors.New("payments: event already queued")

// ErrRejected marks a session or event that can never be processed (not an event, a type the
// flow does not handle, an unknown tenant, member or product, missing metadata, a connected
// account that is not the tenant's, no payment intent). Retrying is pointless: the worker
// gives up on it at once.
var ErrRejected = errors.New("rejected")
