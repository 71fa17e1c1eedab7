package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"testing"

	"gorm.io/gorm"

	"github.com/eventq/eventq/internal/config"
	"github.com/eventq/eventq/internal/eventqueue"
	"github.com/eventq/eventq/internal/openapicheck"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/models"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// apiEnv is a real api process (the same Main as production) on a free port, with its own
// redis-server and database.
type apiEnv struct {
	Redis *testenv.Redis
	DB    *gorm.DB
	Main  *Main
	Base  string
	Queue *eventqueue.Store
	// DBURL is the database's DATABASE_URL, for a second api process on it.
	DBURL string
	// Metrics is the URL of the api's /metrics, on its METRICS_ADDR listener.
	Metrics string
}

func startAPI(t *testing.T, extraEnv ...string) *apiEnv {
	t.Helper()
	db, dbURL := testenv.DB(t)
	return startAPIOn(t, testenv.StartRedis(t), db, dbURL, extraEnv...)
}

// startAPIOn starts an api process on an existing Redis and database, as a second replica.
func startAPIOn(t *testing.T, r *testenv.Redis, db *gorm.DB, dbURL string, extraEnv ...string) *apiEnv {
	t.Helper()
	environ := append([]string{"HTTP_ADDR=127.0.0.1:0", "METRICS_ADDR=127.0.0.1:0", "DATABASE_URL=" + dbURL, "REDIS_URL=" + r.URL()}, testenv.NoRateLimits...)
	environ = append(environ, extraEnv...)
	cfg, err := config.Load(environ)
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	m := NewMain(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if os.Getenv("EVENTQ_TEST_LOG") != "" {
		m.Log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	if err := m.Open(); err != nil {
		t.Fatalf("open api: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return &apiEnv{Redis: r, DB: db, Main: m, Base: "http://" + m.Addr(), Queue: eventqueue.New(r.Client()), DBURL: dbURL,
		Metrics: "http://" + m.MetricsAddr() + "/metrics"}
}

// tenant is a tenant with a token; testenv.MustTenant makes one.
type tenant = testenv.Tenant

type response struct {
	Status int
	Header http.Header
	Body   []byte
}

// Do sends one request; token may be empty.
func (e *apiEnv) Do(t *testing.T, method, path, token string, body []byte, headers ...string) response {
	t.Helper()
	req, err := http.NewRequest(method, e.Base+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	// Every exchange is held up to docs/openapi.yaml (a decoded body: Go's client asked for
	// and undid the gzip unless the test chose its own Accept-Encoding).
	if res.Header.Get("Content-Encoding") == "" {
		if err := openapicheck.Check(method, e.Base+path, req.Header, body, res.StatusCode, res.Header, b); err != nil {
			t.Errorf("openapi: %v", err)
		}
	}
	return response{Status: res.StatusCode, Header: res.Header, Body: b}
}

// getMetrics GETs the api's /metrics from its METRICS_ADDR listener.
func (e *apiEnv) getMetrics(t *testing.T) response {
	t.Helper()
	res, err := http.Get(e.Metrics)
	if err != nil {
		t.Fatalf("GET %s: %v", e.Metrics, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{Status: res.StatusCode, Header: res.Header, Body: b}
}

// readResult is the GET /api/platform/events body.
type readResult struct {
	Data struct {
		Count  int                 `json:"count"`
		Events []models.QueueEvent `json:"events"`
	} `json:"data"`
}

// MustRead GETs the tenant's events and decodes them.
func (e *apiEnv) MustRead(t *testing.T, tn tenant) readResult {
	t.Helper()
	res := e.Do(t, "GET", "/api/platform/events", tn.Token, nil)
	if res.Status != 200 {
		t.Fatalf("GET events: %d %s", res.Status, res.Body)
	}
	var out readResult
	if err := json.Unmarshal(res.Body, &out); err != nil {
		t.Fatalf("decode %s: %v", res.Body, err)
	}
	if out.Data.Count != len(out.Data.Events) {
		t.Fatalf("count %d but %d events", out.Data.Count, len(out.Data.Events))
	}
	return out
}

// MustTrack posts events for tn to /api/track and returns the ids.
func (e *apiEnv) MustTrack(t *testing.T, tn tenant, events ...map[string]any) []string {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"site_key": tn.SiteKey, "events": events})
	res := e.Do(t, "POST", "/api/track", "", body, "User-Agent", "Mozilla/5.0 (test)")
	if res.Status != 202 {
		t.Fatalf("POST /api/track: %d %s", res.Status, res.Body)
	}
	var out struct {
		Data struct {
			IDs []string `json:"ids"`
		} `json:"data"`
	}
	if err := json.Unmarshal(res.Body, &out); err != nil || len(out.Data.IDs) != len(events) {
		t.Fatalf("bad 202 body %s", res.Body)
	}
	return out.Data.IDs
}

// QueueLen is the length of tn's Redis list, read directly.
func (e *apiEnv) QueueLen(t *testing.T, tn tenant) int64 {
	t.Helper()
	n, err := e.Queue.Len(context.Background(), tn.ID)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// EventRows counts tn's stored events.
func (e *apiEnv) EventRows(t *testing.T, tn tenant) int64 {
	t.Helper()
	var n int64
	if err := e.DB.Model(&models.TrackedEvent{}).Where("tenant_id = ?", tn.ID).Count(&n).Error; err != nil {
		t.Fatal(err)
	}
	return n
}

func pageView(session string, seq int) map[string]any {
	return map[string]any{"type": "page_view", "session_id": session, "url": "https://shop.example/a/b?x=1", "event_sequence": seq}
}

func assertBody(t *testing.T, res response, status int, body string) {
	t.Helper()
	if res.Status != status || string(res.Body) != body {
		t.Fatalf("got %d %s\nwant %d %s", res.Status, res.Body, status, body)
	}
}
