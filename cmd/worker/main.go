// Command worker runs eventq's background jobs on asynq: fulfilment and housekeeping.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/hibiken/asynq"

	"github.com/eventq/eventq/app"
	"github.com/eventq/eventq/internal/clock"
	"github.com/eventq/eventq/internal/config"
	"github.com/eventq/eventq/jobs"
)

func main() {
	os.Exit(app.Serve("worker", func(cfg config.Config, log *slog.Logger) app.Process { return NewMain(cfg, log) }))
}

// Started is what Serve logs once the process is open.
func (m *Main) Started() (string, []any) { return "worker: running", []any{} }

// Main is the worker process: the application, and an asynq server and the periodic loops on its
// default Redis connection.
type Main struct {
	Config config.Config
	Log    *slog.Logger
	Clock  clock.Clock
	App    *app.App

	server    *asynq.Server
	mux       *asynq.ServeMux
	metrics   *http.Server
	metricsLn net.Listener
	reconcile bool // whether Run triggers the periodic reconciliation
}

// NewMain returns a Main with the real clock; tests may replace fields before Open.
func NewMain(cfg config.Config, log *slog.Logger) *Main {
	return &Main{Config: cfg, Log: log, Clock: clock.Real{}}
}

// Open builds the application and prepares the server and its handlers. On failure it
// closes what it had opened.
func (m *Main) Open() (err error) {
	defer func() {
		if err != nil {
			m.Close()
		}
	}()
	a, err := app.Open(m.Config, m.Log, m.Clock)
	if err != nil {
		return err
	}
	m.App = a
	m.server = asynq.NewServerFromRedisClient(a.Redis[config.DefaultConnection], serverConfig(m.Log))
	m.mux = asynq.NewServeMux()
	jobs.Register(m.mux, &jobs.Handlers{
		Delivery: a.Delivery, Payments: a.Payments, Reconciler: a.Reconciler, Retention: a.Retention, Log: m.Log,
		DeadLetters: a.Consume,
	})
	m.reconcile = a.Reconciler != nil && m.Config.PSP.ReconcileInterval > 0
	if m.Config.WorkerMetricsAddr != "" {
		mux := http.NewServeMux()
		mux.Handle("/metrics", a.Metrics.Handler())
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

	if m.metrics != nil {
		go m.metrics.Serve(m.metricsLn)
	}
	// Partitions ahead before anything else, so that no insert waits for a maintenance run.
	if err := m.App.Retention.EnsureAhead(ctx, m.Clock.Now()); err != nil {
		m.Log.Warn("worker: could not create the stored events' partitions ahead; the maintenance task tries again", "err", err)
	}
	reconcile := time.Duration(0)
	switch {
	case m.reconcile:
		reconcile = m.Config.PSP.ReconcileInterval
	case m.Config.PSP.ReconcileInterval > 0:
		m.Log.Warn("worker: reconciliation with the provider is off: PSP_SECRET_KEY is not set")
	default:
		m.Log.Info("worker: reconciliation with the provider is off (PSP_RECONCILE_INTERVAL=off)")
	}
	jobs.RunLoops(ctx, jobs.Loops(jobs.LoopDeps{Tasks: m.App.Tasks, Clock: m.Clock, Log: m.Log, Spool: m.App.Delivery,
		Erasures: m.App.Erasures, Prune: m.Config.Retention.PruneInterval, Reconcile: reconcile}))
	return m.Close()
}

// Close stops the server and the metrics endpoint, then closes the
// application. Safe to call more than once.
func (m *Main) Close() error {
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
	var err error
	if m.App != nil {
		err = m.App.Close()
		m.App = nil
	}
	return err
}

// asynqLogger adapts slog to asynq's logger interface.
type asynqLogger struct{ l *slog.Logger }

func (a asynqLogger) Debug(args ...any) { a.l.Debug(fmt.Sprint(args...)) }
func (a asynqLogger) Info(args ...any)  { a.l.Info(fmt.Sprint(args...)) }
func (a asynqLogger) Warn(args ...any)  { a.l.Warn(fmt.Sprint(args...)) }
func (a asynqLogger) Error(args ...any) { a.l.Error(fmt.Sprint(args...)) }
func (a asynqLogger) Fatal(args ...any) { a.l.Error(fmt.Sprint(args...)); os.Exit(1) }
