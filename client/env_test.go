package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/eventq/eventq/internal/eventqueue"
	"github.com/eventq/eventq/internal/openapicheck"
	"github.com/eventq/eventq/internal/testenv"
)

// apiBin is the real api binary, built once by TestMain.
var apiBin string

func TestMain(m *testing.M) {
	dir, cleanup, err := testenv.BuildBinaries("github.com/eventq/eventq/cmd/api")
	if err != nil {
		fmt.Fprintln(os.Stderr, "client: building the api failed:", err)
		os.Exit(1)
	}
	apiBin = filepath.Join(dir, "api")
	testenv.Main(openapicheck.Watching(m), cleanup)
}

// apiEnv is one api process on a free port with its own redis-server and database.
type apiEnv struct {
	Base  string
	DB    *gorm.DB
	Queue *eventqueue.Store
	env   []string // the api's environment
}

// startAPI starts the api with the test's environment plus extraEnv ("NAME=value").
func startAPI(t *testing.T, extraEnv ...string) *apiEnv {
	t.Helper()
	r := testenv.StartRedis(t)
	db, dbURL := testenv.DB(t)
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	base := "http://" + addr
	openapicheck.API(base)
	env := append(append(append(os.Environ(), testenv.NoRateLimits...), "DATABASE_URL="+dbURL, "REDIS_URL="+r.URL(), "METRICS_ADDR=off"), extraEnv...)
	testenv.NewProcess(t, apiBin, append(env, "HTTP_ADDR="+addr, "APP_URL="+base)).Start()
	testenv.WaitHTTP(t, base+"/healthz", 20*time.Second)
	return &apiEnv{Base: base, DB: db, Queue: eventqueue.New(r.Client()), env: env}
}

// Another starts a second api process on e's Redis and database and returns its base URL.
func (e *apiEnv) Another(t *testing.T) string {
	t.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	base := "http://" + addr
	openapicheck.API(base)
	testenv.NewProcess(t, apiBin, append(slices.Clone(e.env), "HTTP_ADDR="+addr, "APP_URL="+base)).Start()
	testenv.WaitHTTP(t, base+"/healthz", 20*time.Second)
	return base
}

// tenant is a tenant with a token; testenv.MustTenant makes one.
type tenant = testenv.Tenant

// Track posts events to POST /api/track as the browser library does and returns their ids.
// It is safe to call from any goroutine.
func (e *apiEnv) Track(tn tenant, events ...map[string]any) ([]string, error) {
	body, _ := json.Marshal(map[string]any{"site_key": tn.SiteKey, "events": events})
	req, _ := http.NewRequest("POST", e.Base+"/api/track", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "Mozilla/5.0 (client test)")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	var out struct {
		Data struct {
			IDs []string `json:"ids"`
		} `json:"data"`
	}
	if res.StatusCode != 202 || json.Unmarshal(b, &out) != nil || len(out.Data.IDs) != len(events) {
		return nil, fmt.Errorf("POST /api/track: %d %s", res.StatusCode, b)
	}
	return out.Data.IDs, nil
}

// MustTrack posts n page views of session and returns their ids.
func (e *apiEnv) MustTrack(t *testing.T, tn tenant, session string, n int) []string {
	t.Helper()
	events := make([]map[string]any, n)
	for i := range events {
		events[i] = pageView(session, i)
	}
	ids, err := e.Track(tn, events...)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

func pageView(session string, seq int) map[string]any {
	return map[string]any{"type": "page_view", "session_id": session, "url": "https://shop.example/a/b?x=1&y=<2>", "event_sequence": seq}
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

// RawRead is the body of GET /api/platform/events, byte for byte.
func (e *apiEnv) RawRead(t *testing.T, tn tenant) []byte {
	t.Helper()
	req, _ := http.NewRequest("GET", e.Base+"/api/platform/events", nil)
	req.Header.Set("Authorization", "Bearer "+tn.Token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("GET events: %d %s %v", res.StatusCode, b, err)
	}
	return b
}

// proxy sits between a Client and the real api. It records every request and lets a test
// answer some of them itself: hook returns true when it has answered.
type proxy struct {
	URL  string
	mu   sync.Mutex
	log  []string // "GET" or "DELETE count=N", in arrival order
	hook func(w http.ResponseWriter, r *http.Request, forward http.HandlerFunc) bool
}

func newProxy(t *testing.T, target string, hook func(w http.ResponseWriter, r *http.Request, forward http.HandlerFunc) bool) *proxy {
	t.Helper()
	return startProxy(t, target, false, hook)
}

// newLegacyProxy is newProxy in front of what looks like a server from before offsets and long
// polling: the wait and offset parameters are dropped and Queue-Offset is not answered.
func newLegacyProxy(t *testing.T, target string, hook func(w http.ResponseWriter, r *http.Request, forward http.HandlerFunc) bool) *proxy {
	t.Helper()
	return startProxy(t, target, true, hook)
}

func startProxy(t *testing.T, target string, legacy bool, hook func(w http.ResponseWriter, r *http.Request, forward http.HandlerFunc) bool) *proxy {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.ErrorLog = log.New(io.Discard, "", 0) // requests cancelled by the client are expected
	if legacy {
		rp.ModifyResponse = func(res *http.Response) error {
			res.Header.Del("Queue-Offset")
			return nil
		}
	}
	p := &proxy{hook: hook}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if legacy {
			q := r.URL.Query()
			q.Del("wait")
			q.Del("offset")
			r.URL.RawQuery = q.Encode()
		}
		p.mu.Lock()
		p.log = append(p.log, strings.TrimSpace(r.Method+" "+r.URL.RawQuery))
		p.mu.Unlock()
		if p.hook != nil && p.hook(w, r, rp.ServeHTTP) {
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	p.URL = srv.URL
	return p
}

// Requests returns the recorded requests.
func (p *proxy) Requests() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.log...)
}

// Count counts recorded requests starting with prefix.
func (p *proxy) Count(prefix string) int {
	n := 0
	for _, r := range p.Requests() {
		if strings.HasPrefix(r, prefix) {
			n++
		}
	}
	return n
}

// answer writes a Laravel-shaped error.
func answer(w http.ResponseWriter, status int, message string, header ...string) {
	for i := 0; i+1 < len(header); i += 2 {
		w.Header().Set(header[i], header[i+1])
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"message":%q}`, message)
}
