package delivery

import (
	"context"
	"errors"
	"log/slog"
	"sync"

	"github.com/eventq/eventq/internal/breaker"
	"github.com/eventq/eventq/internal/clock"
	"github.com/eventq/eventq/internal/eventqueue"
	"github.com/eventq/eventq/internal/eventstore"
	"github.com/eventq/eventq/internal/features"
	"github.com/eventq/eventq/internal/metrics"
	"github.com/eventq/eventq/models"
	"gorm.io/gorm"
)

// Options are what a Service is built from.
type Options struct {
	DB     *gorm.DB // the tenants' erased members, and a ping before a drain
	Events *eventstore.Store
	Queue  *eventqueue.Store
	// Queueing says which tenants' events are queued (UseQueueEvents).
	Queueing features.Queueing
	Clock    clock.Clock
	Log      *slog.Logger
	Metrics  *metrics.Metrics // may be nil
	// DatabaseDown is open while the database was found unavailable: a commit that finds it
	// open spools at once, unless other commits succeed meanwhile (outage). Ingestion's
	// lookups share it, to answer from memory meanwhile.
	DatabaseDown *breaker.Breaker
	// Spool bounds the ingestion spool (INGEST_SPOOL_MAX and the per-tenant and byte limits);
	// a zero Events turns the spool off.
	Spool eventqueue.SpoolLimits
}

// Service delivers accepted events: it stores them and appends those of queued tenants to
// their queues, exactly once. It is safe for concurrent use.
type Service struct {
	db       *gorm.DB
	events   *eventstore.Store
	queue    *eventqueue.Store
	queueing features.Queueing
	clock    clock.Clock
	log      *slog.Logger
	metrics  *metrics.Metrics
	limits   eventqueue.SpoolLimits

	requests   chan *commitRequest
	pushed     chan settlement
	breaker    *breaker.Breaker // open while Redis failed an append: settling skips its round trips
	down       *outage
	stop       chan struct{}
	closeOnce  sync.Once
	commitOnce sync.Once // starts the group-commit loops on the first commit
	wg         sync.WaitGroup
}

// New returns a Service; its group-commit goroutines start with the first commit and Close
// stops them.
func New(o Options) *Service {
	if o.DatabaseDown == nil {
		o.DatabaseDown = &breaker.Breaker{}
	}
	d := &Service{db: o.DB, events: o.Events, queue: o.Queue, queueing: o.Queueing, clock: o.Clock, log: o.Log, metrics: o.Metrics,
		limits: o.Spool, down: newOutage(o.DatabaseDown), breaker: &breaker.Breaker{Cooldown: breakerCooldown},
		requests: make(chan *commitRequest, 4096), pushed: make(chan settlement, 1024), stop: make(chan struct{})}
	d.startCommitters()
	return d
}

// Events is the store the service writes to.
func (d *Service) Events() *eventstore.Store { return d.events }

// Deliver stores rows of tenant and, when queued, appends them to its queue in their order,
// and returns once both are done (a commit that lands only after spoolAfter, as its pusher
// takes it: the append follows). If the append fails after the commit, the events stay pending
// and Requeue pushes them later: no committed event is lost. If the database cannot be reached
// (or does not answer within spoolAfter), the rows go to the spool instead, and Deliver returns
// once they are there; DrainSpool stores them later. cause, when not nil, is why the caller
// could not even decide whether the rows are queued (the flags were unreadable): they are
// spooled at once if cause allows it, and cause is returned otherwise.
func (d *Service) Deliver(ctx context.Context, tenant uint64, rows []models.TrackedEvent, queued bool, cause error) error {
	err := cause
	spoolNow := err != nil && d.spoolable(err)
	if err != nil && !spoolNow {
		return err
	}
	if !spoolNow && d.limits.Events > 0 && d.down.down(d.clock.Now(), tenant) {
		spoolNow, err = true, errCommitSlow // the database was just found down: no commit to wait for
	}
	if !spoolNow {
		err = d.commit(ctx, tenant, rows, queued)
	}
	if err != nil && d.spoolable(err) {
		d.down.failed(d.clock.Now(), tenant, errors.Is(err, errCommitSlow) && !d.events.Distributed())
		err = d.spool(ctx, tenant, rows, err)
	}
	return err // as it is: the caller maps the spool's and the database's errors to statuses
}

// Held is the store of the service's held events, its writes as the store's one writer.
func (d *Service) Held() *Held { return &Held{Events: d.events, Queue: d.queue} }
