// Command worker runs eventq's background jobs on asynq: fulfilment and housekeeping.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/eventq/eventq/internal/clock"
	"github.com/eventq/eventq/internal/config"
	"github.com/eventq/eventq/internal/infra"
	"github.com/eventq/eventq/internal/payments"
	"github.com/eventq/eventq/internal/profiling"
	"github.com/eventq/eventq/internal/psp"
	"github.com/eventq/eventq/internal/retention"
	"github.com/eventq/eventq/internal/tracking"
	"github.com/eventq/eventq/jobs"
)

func main() {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	cfg, err := config.Load(os.Environ())
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(2)
	}
	prof, err := profiling.Start(cfg.PprofAddr, log) // off unless PPROF_ADDR is set
	if err != nil {
		fmt.Fprintf(os.Stderr, "worker: PPROF_ADDR: %v\n", err)
		os.Exit(1)
	}
	defer prof.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	m := NewMain(cfg, log)
	if err := m.Open(); err != nil {
		log.Error("worker: start failed", "err", err)
		os.Exit(1)
	}
	log.Info("worker: running")
	if err := m.Run(ctx); err != nil {
		log.Error("worker: stopped with error", "err", err)
		os.Exit(1)
	}
}

// Main is the worker process: an asynq server and scheduler on the default Redis connection.
type Main struct {
	Config config.Config
	Log    *slog.Logger
	Clock  clock.Clock
	Infra  *infra.Infra

	server    *asynq.Server
	scheduler *asynq.Scheduler
	tasks     *asynq.Client
	mux       *asynq.ServeMux
	metrics   *http.Server
	metricsLn net.Listener
	ingest    *tracking.Ingestor
	retention *retention.Pruner
	reconcile bool // whether Run triggers the periodic reconciliation
}

// NewMain returns a Main with the real clock; tests may replace fields before Open.
func NewMain(cfg config.Config, log *slog.Logger) *Main {
	return &Main{Config: cfg, Log: log, Clock: clock.Real{}}
}

// Open connects and prepares the server, scheduler and handlers. On failure it closes what it
// had opened.
func (m *Main) Open() (err error) {
	defer func() {
		if err != nil {
			m.Close()
		}
	}()
	in, err := infra.Open(m.Config, m.Clock)
	if err != nil {
		return err
	}
	m.Infra = in
	rdb := in.Redis[config.DefaultConnection]
	m.server = asynq.NewServerFromRedisClient(rdb, serverConfig(m.Log))
	// The scheduler gets its own connection: asynq's scheduler closes its client on shutdown.
	schedConn, err := schedulerConn(m.Config.Redis)
	if err != nil {
		return err
	}
	m.scheduler = asynq.NewScheduler(schedConn, &asynq.SchedulerOpts{Logger: asynqLogger{m.Log}, LogLevel: asynq.WarnLevel})
	for _, p := range jobs.PeriodicTasks() {
		if _, err := m.scheduler.Register(p.Spec, p.Task, p.Opts...); err != nil {
			return fmt.Errorf("worker: schedule %s: %w", p.Task.Type(), err)
		}
	}
	m.tasks = asynq.NewClientFromRedisClient(rdb)
	mx := in.Metrics()
	ingest := tracking.NewIngestor(in.DB, in.Flags, in.Queue, m.Clock, m.Log, mx)
	m.ingest = ingest
	m.mux = asynq.NewServeMux()
	provider, queue := psp.NewClient(m.Config.PSP.SecretKey, m.Config.PSP.APIBase), jobs.NewProviderEvents(m.tasks)
	pay := &payments.Service{
		DB: in.DB, PSP: provider, Queue: queue, Queueing: in.Flags, Ingest: ingest, Clock: m.Clock,
		AppURL: m.Config.AppURL, Log: m.Log, Metrics: mx,
	}
	m.retention = &retention.Pruner{DB: in.DB, Keep: m.Config.Retention.Keep, Clock: m.Clock, Log: m.Log, Metrics: mx}
	h := &jobs.Handlers{Ingest: ingest, Payments: pay, Retention: m.retention, Log: m.Log}
	if m.Config.PSP.SecretKey != "" {
		h.Reconciler = &payments.Reconciler{DB: in.DB, PSP: provider, Queue: queue, Clock: m.Clock, Log: m.Log, Metrics: mx}
	}
	jobs.Register(m.mux, h)
	m.reconcile = h.Reconciler != nil && m.Config.PSP.ReconcileInterval > 0
	if m.Config.WorkerMetricsAddr != "" {
		mux := http.NewServeMux()
		mux.Handle("/metrics", mx.Handler())
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte(`{"status":"ok"}`)) })
		m.metricsLn, err = net.Listen("tcp", m.Config.WorkerMetricsAddr)
		if err != nil {
			return fmt.Errorf("worker: listen on WORKER_METRICS_ADDR %s: %w", m.Config.WorkerMetricsAddr, err)
		}
		m.metrics = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	}
	return nil
}

// MetricsAddr is the bound metrics address, or "" when metrics are not served.
func (m *Main) MetricsAddr() string {
	if m.metricsLn == nil {
		return ""
	}
	return m.metricsLn.Addr().String()
}

// Run processes tasks until ctx is done, then lets running tasks finish (up to 10 s).
func (m *Main) Run(ctx context.Context) error {
	if err := m.server.Start(m.mux); err != nil {
		return fmt.Errorf("worker: start: %w", err)
	}
	if err := m.scheduler.Start(); err != nil {
		m.server.Shutdown()
		return fmt.Errorf("worker: scheduler: %w", err)
	}

	if m.metrics != nil {
		go m.metrics.Serve(m.metricsLn)
	}
	// Partitions ahead before anything else, so that no insert waits for a maintenance run.
	if err := m.retention.EnsureAhead(ctx, m.Clock.Now()); err != nil {
		m.Log.Warn("worker: could not create the stored events' partitions ahead; the maintenance task tries again", "err", err)
	}
	maintained := make(chan struct{})
	go func() {
		defer close(maintained)
		jobs.TriggerMaintainEvents(ctx, m.tasks, m.Clock, m.Config.Retention.PruneInterval, m.Log)
	}()
	triggered := make(chan struct{})
	switch {
	case m.reconcile:
		go func() {
			defer close(triggered)
			jobs.TriggerReconcile(ctx, m.tasks, m.Clock, m.Config.PSP.ReconcileInterval, m.Log)
		}()
	case m.Config.PSP.ReconcileInterval > 0:
		close(triggered)
		m.Log.Warn("worker: reconciliation with the provider is off: PSP_SECRET_KEY is not set")
	default:
		close(triggered)
		m.Log.Info("worker: reconciliation with the provider is off (PSP_RECONCILE_INTERVAL=off)")
	}
	<-ctx.Done()
	<-triggered
	<-maintained
	return m.Close()
}

// Close stops the scheduler and server and closes connections.
func (m *Main) Close() error {
	if m.scheduler != nil {
		m.scheduler.Shutdown()
		m.scheduler = nil
	}
	if m.server != nil {
		m.server.Shutdown()
		m.server = nil
	}
	if m.metrics != nil {
		m.metrics.Close()
		m.metrics = nil
	}
	if m.metricsLn != nil { // closed already if the server served it; not otherwise
		m.metricsLn.Close()
		m.metricsLn = nil
	}
	if m.ingest != nil {
		m.ingest.Close()
		m.ingest = nil
	}
	var err error
	if m.Infra != nil {
		err = m.Infra.Close()
		m.Infra = nil
	}
	return errors.Join(err)
}

// schedulerConn is the default Redis connection as asynq connection options.
func schedulerConn(cfg config.RedisConfig) (asynq.RedisConnOpt, error) {
	opt, err := redis.ParseURL(cfg.URLs[config.DefaultConnection])
	if err != nil {
		return nil, fmt.Errorf("worker: REDIS_URL: %w", err)
	}
	if len(cfg.ClusterAddrs) > 0 {
		return asynq.RedisClusterClientOpt{Addrs: cfg.ClusterAddrs, Username: opt.Username, Password: opt.Password, TLSConfig: opt.TLSConfig}, nil
	}
	return asynq.RedisClientOpt{Addr: opt.Addr, Username: opt.Username, Password: opt.Password, DB: opt.DB, TLSConfig: opt.TLSConfig}, nil
}

// asynqLogger adapts slog to asynq's logger interface.
type asynqLogger struct{ l *slog.Logger }

func (a asynqLogger) Debug(args ...any) { a.l.Debug(fmt.Sprint(args...)) }
func (a asynqLogger) Info(args ...any)  { a.l.Info(fmt.Sprint(args...)) }
func (a asynqLogger) Warn(args ...any)  { a.l.Warn(fmt.Sprint(args...)) }
func (a asynqLogger) Error(args ...any) { a.l.Error(fmt.Sprint(args...)) }
func (a asynqLogger) Fatal(args ...any) { a.l.Error(fmt.Sprint(args...)); os.Exit(1) }
