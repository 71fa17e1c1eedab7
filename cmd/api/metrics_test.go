package main

import (
	"log/slog"
	"net"
	"regexp"
	"strings"
	"testing"

	"github.com/hibiken/asynq"

	"github.com/eventq/eventq/internal/config"
	"github.com/eventq/eventq/internal/testenv"
)

func TestMetricsCountRequestsAndEvents(t *testing.T) {
	e := startAPI(t)
	tn := testenv.MustTenant(t, e.DB, true)
	e.MustTrack(t, tn, pageView("s", 1), pageView("s", 2))
	e.MustRead(t, tn)
	e.Do(t, "DELETE", "/api/platform/events?count=2", tn.Token, nil)
	e.Do(t, "DELETE", "/api/platform/events?count=0", tn.Token, nil)
	e.Do(t, "GET", "/no/such/path", "", nil)

	// Never on the public listener: tenant ids and lease activity are not for the internet.
	assertBody(t, e.Do(t, "GET", "/metrics", "", nil), 404, `{"message":"Not Found."}`)
	res := e.getMetrics(t)
	if res.Status != 200 || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("GET /metrics: %d %s", res.Status, res.Header.Get("Content-Type"))
	}
	body := string(res.Body)
	for _, want := range []string{
		`eventq_http_requests_total{method="POST",route="/api/track",status="202"} 1`,
		`eventq_http_requests_total{method="GET",route="/api/platform/events",status="200"} 1`,
		`eventq_http_requests_total{method="DELETE",route="/api/platform/events",status="204"} 1`,
		`eventq_http_requests_total{method="DELETE",route="/api/platform/events",status="422"} 1`,
		`eventq_http_requests_total{method="GET",route="unmatched",status="404"} 2`, // the path, and /metrics on the public listener
		`eventq_events_ingested_total 2`,
		`eventq_events_queued_total 2`,
		`eventq_events_read_total 2`,
		`eventq_events_trim_requested_total 2`,
		`eventq_webhooks_total{outcome="bad_signature"} 0`,
		`go_goroutines `,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q in:\n%s", want, grepLines(body, "eventq_"))
		}
	}
	if !regexp.MustCompile(`eventq_http_request_duration_seconds_count\{method="GET",route="/api/platform/events"\} 1`).MatchString(body) {
		t.Error("no latency histogram for the events route")
	}
}

func TestResponsesCarryARequestID(t *testing.T) {
	e := startAPI(t)
	if id := e.Do(t, "GET", "/healthz", "", nil).Header.Get("X-Request-Id"); len(id) < 16 {
		t.Fatalf("X-Request-Id %q", id)
	}
	if id := e.Do(t, "GET", "/healthz", "", nil, "X-Request-Id", "trace-123").Header.Get("X-Request-Id"); id != "trace-123" {
		t.Fatalf("incoming request id not kept: %q", id)
	}
}

func grepLines(body, prefix string) string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// Every eventq and asynq metric the api exports is in the operations guide.
func TestExportedMetricsAreDocumented(t *testing.T) {
	e := startAPI(t)
	tn := testenv.MustTenant(t, e.DB, true)
	e.MustTrack(t, tn, pageView("s", 1))
	e.MustRead(t, tn)
	// The asynq metrics appear once a queue exists: a task no worker takes makes one.
	if _, err := asynq.NewClientFromRedisClient(e.Redis.Client()).Enqueue(asynq.NewTask("test:metrics", nil)); err != nil {
		t.Fatal(err)
	}
	testenv.MustDocumentExportedMetrics(t, "api", e.Metrics,
		"eventq_http_requests_total", "eventq_events_read_total", "asynq_queue_size")
}

// METRICS_ADDR: an address set on purpose that is taken stops the api at start, naming the
// variable; the default taken (a second api on one host) leaves the api serving without
// metrics.
func TestMetricsAddrTaken(t *testing.T) {
	_, dbURL := testenv.DB(t)
	r := testenv.StartRedis(t)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	testenv.Must(t, err)
	defer taken.Close()
	open := func(metrics string) (*Main, error) {
		cfg, err := config.Load([]string{"HTTP_ADDR=127.0.0.1:0", "METRICS_ADDR=" + metrics, "DATABASE_URL=" + dbURL, "REDIS_URL=" + r.URL()})
		testenv.Must(t, err)
		m := NewMain(cfg, slog.New(slog.DiscardHandler))
		return m, m.Open()
	}
	if m, err := open(taken.Addr().String()); err == nil || !strings.Contains(err.Error(), "METRICS_ADDR") {
		if err == nil {
			m.Close()
		}
		t.Fatalf("a taken METRICS_ADDR: %v", err)
	}
	if held, err := net.Listen("tcp", config.DefaultMetricsAddr); err == nil { // else taken already
		defer held.Close()
	}
	m, err := open(config.DefaultMetricsAddr)
	if err != nil {
		t.Fatalf("the default METRICS_ADDR taken: %v", err)
	}
	defer m.Close()
	if m.MetricsAddr() != "" {
		t.Fatalf("metrics on %s", m.MetricsAddr())
	}
}

// HTTP_ADDR taken stops the api at start with an error naming the variable, not a panic.
func TestHTTPAddrTaken(t *testing.T) {
	_, dbURL := testenv.DB(t)
	r := testenv.StartRedis(t)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	testenv.Must(t, err)
	defer taken.Close()
	cfg, err := config.Load([]string{"HTTP_ADDR=" + taken.Addr().String(), "METRICS_ADDR=off", "DATABASE_URL=" + dbURL, "REDIS_URL=" + r.URL()})
	testenv.Must(t, err)
	m := NewMain(cfg, slog.New(slog.DiscardHandler))
	if err := m.Open(); err == nil || !strings.Contains(err.Error(), "HTTP_ADDR") {
		if err == nil {
			m.Close()
		}
		t.Fatalf("a taken HTTP_ADDR: %v", err)
	}
	if err := m.Close(); err != nil { // closing again after the failed open is safe
		t.Fatal(err)
	}
}
