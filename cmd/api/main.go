// Command api is eventq's HTTP server: platform API, tracking ingestion and health checks.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/eventq/eventq/app"
	"github.com/eventq/eventq/internal/clock"
	"github.com/eventq/eventq/internal/config"
	"github.com/eventq/eventq/internal/httpx"
	"github.com/eventq/eventq/routes"
)

func main() {
	os.Exit(app.Serve("api", func(cfg config.Config, log *slog.Logger) app.Process { return NewMain(cfg, log) }))
}

// Started is what Serve logs once the process is open.
func (m *Main) Started() (string, []any) {
	return "api: listening", []any{"addr", m.Addr(), "url", m.Config.AppURL, "metrics", m.MetricsAddr()}
}

// Main is the api process: its config, the application it serves and its HTTP server.
type Main struct {
	Config config.Config
	Log    *slog.Logger
	Clock  clock.Clock
	App    *app.App

	http *fiber.App
	ln   *httpx.Listener
	// metrics serves /metrics on METRICS_ADDR, apart from the public listener; nil when off.
	metrics   *http.Server
	metricsLn net.Listener
}

// NewMain returns a Main with the real clock; tests may replace fields before Open.
func NewMain(cfg config.Config, log *slog.Logger) *Main {
	return &Main{Config: cfg, Log: log, Clock: clock.Real{}}
}

// Open builds the application (connections and services) and binds the listen address (":0"
// picks a port). On failure it closes what it had opened.
func (m *Main) Open() error {
	a, err := app.Open(m.Config, m.Log, m.Clock)
	if err != nil {
		return err
	}
	a.FollowChanges()
	m.App = a
	if m.Config.BenchNoopRoute && !routes.BenchBuild {
		m.Log.Warn("api: BENCH_NOOP_ROUTE is on, but this api was not built with -tags bench: the bench's routes are not served")
	}
	// The listener before the server: Close shuts a server down through its listener.
	ln, err := net.Listen("tcp", m.Config.HTTPAddr)
	if err != nil {
		m.Close()
		return fmt.Errorf("api: listen on HTTP_ADDR %s: %w", m.Config.HTTPAddr, err)
	}
	m.ln = httpx.LingeringListener(ln)
	m.http = routes.New(&routes.Server{
		Health:   routes.Health{PingDB: a.PingDB, Redis: a.Redis},
		Guard:    routes.Guard{Auth: a.Auth, Limiter: a.Limiter, Limits: m.Config.Limits, TrustedProxies: m.Config.TrustedProxies},
		Tracking: a.Ingest, Queues: a.Consume, Payments: a.Payments,
		Tenant:   routes.TenantAPI{Members: a.Members, Products: a.Products, Purchases: a.Purchases, Erasures: a.Erasures, Export: a.Export},
		Operator: routes.OperatorAPI{Tenants: a.Tenants, Tokens: a.Tokens, AdminTokens: m.Config.AdminTokens},
		Log:      m.Log, AppURL: m.Config.AppURL, Metrics: a.Metrics, BenchNoop: m.Config.BenchNoopRoute,
	})
	if m.Config.MetricsAddr != "" {
		m.metricsLn, err = net.Listen("tcp", m.Config.MetricsAddr)
		switch {
		case err != nil && m.Config.MetricsAddr == config.DefaultMetricsAddr:
			// A second api on one host, with the default: it serves, without metrics, rather
			// than not at all. An address set on purpose must work.
			m.Log.Warn("api: METRICS_ADDR's default is taken (another api on this host?); no /metrics here: give each api its own METRICS_ADDR",
				"addr", m.Config.MetricsAddr, "err", err)
			m.metricsLn = nil
		case err != nil:
			m.Close()
			return fmt.Errorf("api: listen on METRICS_ADDR %s: %w", m.Config.MetricsAddr, err)
		default:
			mux := http.NewServeMux()
			mux.Handle("/metrics", a.Metrics.Handler())
			m.metrics = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		}
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

// Addr is the bound listen address.
func (m *Main) Addr() string { return m.ln.Addr().String() }

// Run serves until ctx is done, then drains in-flight requests for up to 10 s and closes.
func (m *Main) Run(ctx context.Context) error {
	errc := make(chan error, 1)
	h := m.http // Close clears m.http, and may run before this goroutine does
	go func() { errc <- h.Listener(m.ln) }()
	if m.metrics != nil {
		srv, ln := m.metrics, m.metricsLn
		go srv.Serve(ln) // ends when Close shuts it down
	}
	select {
	case err := <-errc:
		m.Close()
		return err
	case <-ctx.Done():
	}
	return m.Close()
}

// unusedCloseEvery is how often a shutdown closes the connections that never sent a byte.
const unusedCloseEvery = 50 * time.Millisecond

// Close stops the server, then closes the application. Safe to call more than once.
func (m *Main) Close() error {
	var errs []error
	if m.App != nil { // first: waiting reads are answered now, not at the shutdown's timeout
		m.App.Waiter.Close()
	}
	if m.http != nil {
		// While the shutdown waits for busy connections, those a client opened and never
		// used are closed: the server would count them busy until its timeout.
		stop := make(chan struct{})
		go func() {
			tick := time.NewTicker(unusedCloseEvery)
			defer tick.Stop()
			for {
				m.ln.CloseUnused()
				select {
				case <-stop:
					return
				case <-tick.C:
				}
			}
		}()
		errs = append(errs, m.http.ShutdownWithTimeout(10*time.Second))
		// The shutdown closes the listener only if the server had begun serving on it; a
		// shutdown that came first leaves it to this close, which ends the late Listener.
		m.ln.Close()
		close(stop)
		m.http = nil
	}
	if m.metrics != nil { // and its listener, which a server that never served does not close
		m.metrics.Close()
		m.metricsLn.Close()
		m.metrics = nil
	}
	if m.App != nil { // after the server: in-flight requests finish their commits and trims
		errs = append(errs, m.App.Close())
		m.App = nil
	}
	return errors.Join(errs...)
}
