// Command api is eventq's HTTP server: platform API, tracking ingestion and health checks.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/hibiken/asynq"

	"github.com/eventq/eventq/internal/auth"
	"github.com/eventq/eventq/internal/clock"
	"github.com/eventq/eventq/internal/config"
	"github.com/eventq/eventq/internal/consume"
	"github.com/eventq/eventq/internal/eventqueue"
	"github.com/eventq/eventq/internal/infra"
	"github.com/eventq/eventq/internal/payments"
	"github.com/eventq/eventq/internal/profiling"
	"github.com/eventq/eventq/internal/psp"
	"github.com/eventq/eventq/internal/ratelimit"
	"github.com/eventq/eventq/internal/tracking"
	"github.com/eventq/eventq/jobs"
	"github.com/eventq/eventq/routes"
)

func main() {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	cfg, err := config.Load(os.Environ())
	if err != nil {
		fmt.Fprintln(os.Stderr, "api:", err)
		os.Exit(2)
	}
	prof, err := profiling.Start(cfg.PprofAddr, log) // off unless PPROF_ADDR is set
	if err != nil {
		fmt.Fprintf(os.Stderr, "api: PPROF_ADDR: %v\n", err)
		os.Exit(1)
	}
	defer prof.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	m := NewMain(cfg, log)
	if err := m.Open(); err != nil {
		log.Error("api: start failed", "err", err)
		os.Exit(1)
	}
	log.Info("api: listening", "addr", m.Addr(), "url", cfg.AppURL)
	if err := m.Run(ctx); err != nil {
		log.Error("api: stopped with error", "err", err)
		os.Exit(1)
	}
}

// Main is the api process: its config, connections and HTTP server.
type Main struct {
	Config config.Config
	Log    *slog.Logger
	Clock  clock.Clock
	Infra  *infra.Infra

	app    *fiber.App
	ln     net.Listener
	tasks  *asynq.Client
	ingest *tracking.Ingestor
	waiter *eventqueue.Waiter
	trims  *consume.TrimLog
}

// NewMain returns a Main with the real clock; tests may replace fields before Open.
func NewMain(cfg config.Config, log *slog.Logger) *Main {
	return &Main{Config: cfg, Log: log, Clock: clock.Real{}}
}

// Open connects to the database and Redis and binds the listen address (":0" picks a port).
func (m *Main) Open() error {
	in, err := infra.Open(m.Config, m.Clock)
	if err != nil {
		return err
	}
	m.Infra = in
	m.tasks = asynq.NewClientFromRedisClient(in.Redis[config.DefaultConnection])
	mx := in.Metrics()
	ingest := tracking.NewIngestor(in.DB, in.Flags, in.Queue, m.Clock, m.Log, mx)
	m.ingest = ingest
	m.waiter = eventqueue.NewWaiter(in.Redis[m.Config.QueueConnection], m.Clock, m.Log)
	m.trims = consume.NewTrimLog(in.DB, m.Clock, m.Log)
	pay := &payments.Service{
		DB: in.DB, PSP: psp.NewClient(m.Config.PSP.SecretKey, m.Config.PSP.APIBase),
		Webhooks: psp.NewVerifier(m.Config.PSP.WebhookSecrets, m.Clock), Queue: jobs.NewProviderEvents(m.tasks),
		Queueing: in.Flags, Ingest: ingest, Clock: m.Clock, AppURL: m.Config.AppURL, Log: m.Log, Metrics: mx,
	}
	m.app = routes.New(&routes.Server{
		PingDB: in.PingDB, Redis: in.Redis, Log: m.Log, Ingest: ingest,
		Consume: &consume.Service{
			DB: in.DB, Queue: in.Queue, Queueing: in.Flags, Waiter: m.waiter, Trims: m.trims, Held: ingest, Clock: m.Clock,
			MaxDeliveries: m.Config.Limits.QueueMaxDeliveries,
		},
		Auth:           auth.NewAuthenticator(in.DB, m.Clock, m.Log),
		TrustedProxies: m.Config.TrustedProxies,
		Payments:       pay,
		Metrics:        mx,
		Limiter:        ratelimit.New(in.Redis[config.DefaultConnection], m.Clock, mx),
		Limits:         m.Config.Limits,
		BenchNoop:      m.Config.BenchNoopRoute,
	})
	m.ln, err = net.Listen("tcp", m.Config.HTTPAddr)
	if err != nil {
		m.Close()
		return fmt.Errorf("api: listen on HTTP_ADDR %s: %w", m.Config.HTTPAddr, err)
	}
	return nil
}

// Addr is the bound listen address.
func (m *Main) Addr() string { return m.ln.Addr().String() }

// Run serves until ctx is done, then drains in-flight requests for up to 10 s and closes.
func (m *Main) Run(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- m.app.Listener(routes.LingeringListener(m.ln)) }()
	select {
	case err := <-errc:
		m.Close()
		return err
	case <-ctx.Done():
	}
	return m.Close()
}

// Close stops the server and closes connections. Safe to call more than once.
func (m *Main) Close() error {
	var errs []error
	if m.waiter != nil { // first: waiting reads are answered now, not at the shutdown's timeout
		m.waiter.Close()
		m.waiter = nil
	}
	if m.app != nil {
		errs = append(errs, m.app.ShutdownWithTimeout(10*time.Second))
		m.app = nil
	}
	if m.ingest != nil { // after the server: in-flight requests finish their commits
		m.ingest.Close()
		m.ingest = nil
	}
	if m.trims != nil { // after the server: the last trims' fronts are written
		m.trims.Close()
		m.trims = nil
	}
	if m.Infra != nil {
		errs = append(errs, m.Infra.Close())
		m.Infra = nil
	}
	return errors.Join(errs...)
}
