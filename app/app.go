// Package app is eventq's composition root: it opens a process's connections (the database,
// the named Redis connections, the asynq client) and builds every service on them once, for
// the api, the worker and the operator CLI alike, and closes them in the reverse order.
//
// It sits between cmd and the packages it wires: cmd/api puts the routes on an App, cmd/worker
// the task handlers and the asynq server, cmd/eventq takes the services its commands need.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/hibiken/asynq"
	asynqmetrics "github.com/hibiken/asynq/x/metrics"
	"github.com/prometheus/client_golang/prometheus"
	"gorm.io/gorm"

	"github.com/eventq/eventq/internal/auth"
	"github.com/eventq/eventq/internal/breaker"
	"github.com/eventq/eventq/internal/changes"
	"github.com/eventq/eventq/internal/clock"
	"github.com/eventq/eventq/internal/config"
	"github.com/eventq/eventq/internal/consume"
	"github.com/eventq/eventq/internal/database"
	"github.com/eventq/eventq/internal/delivery"
	"github.com/eventq/eventq/internal/erasure"
	"github.com/eventq/eventq/internal/eventqueue"
	"github.com/eventq/eventq/internal/eventstore"
	"github.com/eventq/eventq/internal/export"
	"github.com/eventq/eventq/internal/features"
	"github.com/eventq/eventq/internal/members"
	"github.com/eventq/eventq/internal/metrics"
	"github.com/eventq/eventq/internal/payments"
	"github.com/eventq/eventq/internal/products"
	"github.com/eventq/eventq/internal/psp"
	"github.com/eventq/eventq/internal/purchases"
	"github.com/eventq/eventq/internal/ratelimit"
	"github.com/eventq/eventq/internal/redisconn"
	"github.com/eventq/eventq/internal/retention"
	"github.com/eventq/eventq/internal/tenants"
	"github.com/eventq/eventq/internal/tracking"
	"github.com/eventq/eventq/jobs"
)

// App is one process's connections and services. Open builds every field; Close releases
// them. The services are safe for concurrent use.
type App struct {
	Config config.Config
	Clock  clock.Clock
	Log    *slog.Logger

	// DB is the database of DATABASE_URL.
	DB *gorm.DB
	// Redis holds the named Redis connections (REDIS_URL, REDIS_<NAME>_URL).
	Redis redisconn.Set
	// Queue is the tenants' event queues, on the connection EVENTQUEUE_QUEUE_CONNECTION names.
	Queue *eventqueue.Store
	// Flags are the per-tenant feature flags.
	Flags *features.Flags
	// Tasks enqueues background tasks on the default Redis connection, in jobs.TaskQueue.
	Tasks *asynq.Client
	// Metrics are eventq's own metrics and asynq's queue figures.
	Metrics *metrics.Metrics

	// Events owns the stored events.
	Events *eventstore.Store
	// Delivery stores accepted events and queues them.
	Delivery *delivery.Service
	// Ingest is ingestion's front end: site keys, minimising, the hand-over to Delivery.
	Ingest *tracking.Ingestor
	// Waiter wakes long-polling reads when their tenant's queue gets events.
	Waiter *eventqueue.Waiter
	// Trims records the queues' fronts after trims.
	Trims *consume.TrimLog
	// Consume reads, trims, leases and rebuilds tenants' queues.
	Consume *consume.Service
	// Payments is the payment flow: checkout, webhook intake, fulfilment, revocation.
	Payments *payments.Service
	// Reconciler compares the provider's events with what was processed; nil without
	// PSP_SECRET_KEY.
	Reconciler *payments.Reconciler
	// Retention keeps the stored events within EVENT_RETENTION.
	Retention *retention.Pruner
	// Auth checks platform API tokens.
	Auth *auth.Authenticator
	// Erasures takes members' erasures and carries them out.
	Erasures *erasure.Service
	// Export streams stored events (the CLI's events export, the member's access export).
	Export *export.Exporter
	// Tokens creates, lists and revokes tenants' API tokens.
	Tokens *auth.Tokens
	// Changes is the change feed: grants, revocations and member changes are announced on
	// it, and Follower (started by FollowChanges, in the api) drops what they void of the
	// caches of Members and Purchases.
	Changes  *changes.Feed
	Follower *changes.Follower
	// Tenants creates, changes and lists tenants, their site keys and features.
	Tenants *tenants.Service
	// Members creates, changes and lists tenants' audience members.
	Members *members.Service
	// Products creates, changes and lists tenants' products.
	Products *products.Service
	// Purchases answers what members bought and may access.
	Purchases *purchases.Service
	// Limiter applies the rate limits.
	Limiter *ratelimit.Limiter

	closers []closer // in opening order; Close runs them backwards
}

type closer struct {
	name  string
	close func() error
}

// Open connects to what cfg names and builds every service; log and clk go to all of them.
// It does not migrate and does not wait for Redis (no connection is made before first use).
// On failure it closes what it had opened and returns nil.
func Open(cfg config.Config, log *slog.Logger, clk clock.Clock) (*App, error) {
	a := &App{Config: cfg, Log: log, Clock: clk}
	if err := a.open(); err != nil {
		return nil, errors.Join(err, a.Close())
	}
	return a, nil
}

// onClose registers what Close must release, in opening order.
func (a *App) onClose(name string, f func() error) {
	a.closers = append(a.closers, closer{name, f})
}

func (a *App) open() error {
	db, err := database.Open(a.Config.DatabaseURL)
	if err != nil {
		return err
	}
	a.DB = db
	a.onClose("database", func() error { return database.Close(db) })

	conns, err := redisconn.Open(a.Config.Redis)
	if err != nil {
		return err
	}
	a.Redis = conns
	a.onClose("redis", conns.Close)

	qc, ok := conns[a.Config.QueueConnection]
	if !ok { // config.Validate guarantees it
		return fmt.Errorf("app: no redis connection %q (EVENTQUEUE_QUEUE_CONNECTION)", a.Config.QueueConnection)
	}
	a.Queue = eventqueue.NewCapped(qc, a.Config.Limits.QueueMaxLength)
	a.Queue.MaxPageBytes = a.Config.Limits.QueuePageMaxBytes
	a.onClose("event queue", func() error { a.Queue.Close(); return nil })

	rdb := conns[config.DefaultConnection]
	a.Flags = features.New(db, a.Clock)
	// Shares rdb: asynq does not close a client it did not open, so there is nothing to close.
	a.Tasks = asynq.NewClientFromRedisClient(rdb)
	a.Metrics = metrics.New()
	a.Metrics.Registry.MustRegister(unchecked{asynqmetrics.NewQueueMetricsCollector(a.TaskInspector())})

	a.Events = eventstore.New(db)
	a.onClose("event store", func() error { a.Events.Close(); return nil })
	dbDown := &breaker.Breaker{Cooldown: database.DownCooldown}
	lim := a.Config.Limits
	a.Delivery = delivery.New(delivery.Options{DB: db, Events: a.Events, Queue: a.Queue, Queueing: a.Flags, Clock: a.Clock,
		Log: a.Log, Metrics: a.Metrics, DatabaseDown: dbDown,
		Spool: eventqueue.SpoolLimits{Events: lim.IngestSpoolMax, TenantEvents: lim.IngestSpoolTenantMax, Bytes: lim.IngestSpoolMaxBytes}})
	a.Ingest = tracking.New(tracking.Options{DB: db, Queueing: a.Flags, Queue: a.Queue, Delivery: a.Delivery, Clock: a.Clock, DatabaseDown: dbDown})
	a.Metrics.SpoolLength(func() float64 {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		n, _ := a.Queue.SpoolEvents(ctx) // unreadable: 0 (the scrape still answers)
		return float64(n)
	})
	a.onClose("delivery", func() error { a.Delivery.Close(); return nil })
	a.Waiter = eventqueue.NewWaiter(qc, a.Clock, a.Log)
	a.onClose("waiter", func() error { a.Waiter.Close(); return nil })
	a.Trims = consume.NewTrimLog(db, a.Clock, a.Log)
	a.onClose("trim log", a.Trims.Close)

	a.Consume = &consume.Service{
		DB: db, Events: a.Events, Queue: a.Queue, Queueing: a.Flags, Waiter: a.Waiter, Trims: a.Trims, Held: a.Delivery, Clock: a.Clock,
		MaxDeliveries: a.Config.Limits.QueueMaxDeliveries, Metrics: a.Metrics,
		Dead: eventqueue.DeadPolicy{Max: a.Config.Limits.QueueMaxDeadLetters, Retention: a.Config.Limits.DeadLetterRetention},
	}
	provider, events := psp.NewClient(a.Config.PSP.SecretKey, a.Config.PSP.APIBase), jobs.NewProviderEvents(a.Tasks)
	a.Changes = changes.NewFeed(rdb, a.Log)
	a.Payments = &payments.Service{
		DB: db, Events: a.Events, PSP: provider, Webhooks: psp.NewVerifier(a.Config.PSP.WebhookSecrets, a.Clock), Queue: events,
		Queueing: a.Flags, Ingest: a.Delivery, Clock: a.Clock, AppURL: a.Config.AppURL, Log: a.Log, Metrics: a.Metrics,
		Returns: payments.NewReturns(a.Clock), Changes: a.Changes,
	}
	if a.Config.PSP.SecretKey != "" {
		a.Reconciler = &payments.Reconciler{DB: db, PSP: provider, Queue: events, Clock: a.Clock, Log: a.Log, Metrics: a.Metrics}
	}
	a.Retention = &retention.Pruner{DB: db, Events: a.Events, Keep: a.Config.Retention.Keep, Clock: a.Clock, Log: a.Log, Metrics: a.Metrics}
	a.Auth = auth.NewAuthenticator(db, a.Clock, a.Log)
	a.onClose("token last-use writes", func() error { a.Auth.Close(); return nil }) // before the database closes
	a.Tokens = auth.NewTokens(db, a.Clock)
	a.Export = export.New(a.Events)
	a.Tenants = tenants.New(db, a.Flags, a.Clock)
	a.Follower = changes.NewFollower(rdb, a.Clock, a.Log)
	a.Members = members.New(db, a.Clock, a.Changes, a.Follower)
	a.Products = products.New(db, a.Clock)
	a.Purchases = purchases.New(db, a.Clock, a.Follower)
	a.Erasures = &erasure.Service{DB: db, Events: a.Events, Queue: a.Queue, Changes: a.Changes, Clock: a.Clock, Log: a.Log}
	a.Limiter = ratelimit.New(rdb, a.Clock, a.Metrics)
	return nil
}

// FollowChanges starts following the change feed, so that Members and Purchases may cache;
// Close stops it. Only the api calls it: other processes answer no entitlement checks.
func (a *App) FollowChanges() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); a.Follower.Run(ctx) }()
	a.onClose("change feed", func() error { cancel(); <-done; return nil })
}

// TaskInspector returns an inspector of the background tasks, on the default Redis connection.
func (a *App) TaskInspector() *asynq.Inspector {
	return asynq.NewInspectorFromRedisClient(a.Redis[config.DefaultConnection])
}

// PingDB reports whether the database answers within ctx.
func (a *App) PingDB(ctx context.Context) error {
	sqlDB, err := a.DB.DB()
	if err != nil {
		return err
	}
	return sqlDB.PingContext(ctx)
}

// Close releases everything Open opened, in the reverse order: the services first (each
// finishes its pending writes), then the event queue, Redis and the database. It returns
// every error, joined, and is safe to call more than once.
func (a *App) Close() error {
	var errs []error
	for i := len(a.closers) - 1; i >= 0; i-- {
		if err := a.closers[i].close(); err != nil {
			errs = append(errs, fmt.Errorf("close %s: %w", a.closers[i].name, err))
		}
	}
	a.closers = nil
	return errors.Join(errs...)
}

// unchecked registers a collector without describing it. asynq's queue collector describes
// itself by collecting, which asks Redis: registered as it is, every Open (each CLI command
// included) would wait for Redis, and without one, for go-redis's dial retries (about 1.7 s).
// Collected on a scrape, it asks Redis then.
type unchecked struct{ prometheus.Collector }

// Describe sends no descriptors, which makes the collector unchecked.
func (unchecked) Describe(chan<- *prometheus.Desc) {}
