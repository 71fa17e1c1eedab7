package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/eventq/eventq/internal/eventqueue"
	"github.com/eventq/eventq/internal/openapicheck"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/models"
)

// consumeAPI is the real api binary on a free port with its own redis-server and database,
// plus a CLI environment on that same database.
type consumeAPI struct {
	*cliEnv
	base  string
	queue *eventqueue.Store
}

// consumeTenant is a tenant set up through the CLI for consuming: UseQueueEvents active and a
// token with events:read and events:delete.
type consumeTenant struct {
	id      uint64
	siteKey string
	token   string
}

func startConsumeAPI(t *testing.T, apiBin string) *consumeAPI {
	t.Helper()
	r := testenv.StartRedis(t)
	dbURL := testenv.DatabaseURL(t)
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	base := "http://" + addr
	openapicheck.API(base)
	testenv.NewProcess(t, apiBin, append(append(os.Environ(), testenv.NoRateLimits...), "HTTP_ADDR="+addr, "METRICS_ADDR=off", "APP_URL="+base, "DATABASE_URL="+dbURL, "REDIS_URL="+r.URL())).Start()
	testenv.WaitHTTP(t, base+"/healthz", 20*time.Second)
	return &consumeAPI{cliEnv: newCLIWithURL(t, dbURL), base: base, queue: eventqueue.New(r.Client())}
}

func (a *consumeAPI) mustTenant(t *testing.T) consumeTenant {
	t.Helper()
	out := a.MustObject(t, tenantKeys, "tenant", "create", "--name", "Consumer shop")
	id := str(t, out, "id")
	tok := a.MustObject(t, tokenKeys, "token", "create", "--tenant", id, "--name", "consumer", "--abilities", "events:read,events:delete")
	a.MustRun(t, "feature", "activate", "UseQueueEvents", "--tenant", id)
	n, _ := models.ParseID(id)
	return consumeTenant{id: n, siteKey: str(t, out, "site_key"), token: str(t, tok, "token")}
}

// track posts n events of session through POST /api/track and returns, for each, the bytes
// the service stores in the queue (models.TrackedEvent.MarshalQueue of its database row).
func (a *consumeAPI) track(t *testing.T, tn consumeTenant, session string, n int) []string {
	t.Helper()
	events := make([]map[string]any, n)
	for i := range events {
		events[i] = map[string]any{"type": "page_view", "session_id": session, "event_sequence": i,
			"url": fmt.Sprintf("https://shop.example/p/%d?a=1&b=<%d>", i, i)}
	}
	events[0]["audience_member_id"] = "m-1"
	body, _ := json.Marshal(map[string]any{"site_key": tn.siteKey, "events": events})
	res, err := http.Post(a.base+"/api/track", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	var ack struct {
		Data struct {
			IDs []string `json:"ids"`
		} `json:"data"`
	}
	if res.StatusCode != 202 || json.Unmarshal(b, &ack) != nil || len(ack.Data.IDs) != n {
		t.Fatalf("POST /api/track: %d %s", res.StatusCode, b)
	}
	out := make([]string, n)
	for i, id := range ack.Data.IDs {
		var row models.TrackedEvent
		if err := a.db.Take(&row, "id = ?", id).Error; err != nil {
			t.Fatalf("event %s: %v", id, err)
		}
		out[i] = string(row.MarshalQueue())
	}
	return out
}

// served returns the events of a GET /api/platform/events, each exactly as served.
func (a *consumeAPI) served(t *testing.T, tn consumeTenant) []string {
	t.Helper()
	req, _ := http.NewRequest("GET", a.base+"/api/platform/events", nil)
	req.Header.Set("Authorization", "Bearer "+tn.token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var body struct {
		Data struct {
			Events []json.RawMessage `json:"events"`
		} `json:"data"`
	}
	if err := json.NewDecoder(res.Body).Decode(&body); err != nil || res.StatusCode != 200 {
		t.Fatalf("GET events: %d %v", res.StatusCode, err)
	}
	out := make([]string, len(body.Data.Events))
	for i, e := range body.Data.Events {
		out[i] = string(e)
	}
	return out
}

func (a *consumeAPI) queueLen(t *testing.T, tn consumeTenant) int64 {
	n, err := a.queue.Len(context.Background(), tn.id)
	if err != nil {
		t.Error(err)
	}
	return n
}

// consume runs `eventq consume` in process with stdout going to out.
func (a *consumeAPI) consume(ctx context.Context, out io.Writer, environ []string, args ...string) (code int, stderr string) {
	var errOut bytes.Buffer
	code = run(ctx, append([]string{"consume"}, args...), environ, out, &errOut)
	return code, errOut.String()
}

func TestConsumeCommand(t *testing.T) {
	bins, cleanup, err := testenv.BuildBinaries("github.com/eventq/eventq/cmd/api", "github.com/eventq/eventq/cmd/eventq")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cleanup)
	api := startConsumeAPI(t, filepath.Join(bins, "api"))
	ctx := context.Background()

	t.Run("prints each event as served, one per line, and trims after the flush", func(t *testing.T) {
		a := api
		tn := a.mustTenant(t)
		stored := a.track(t, tn, "s-1", 3)
		want := a.served(t, tn)
		if strings.Join(want, "\n") != strings.Join(stored, "\n") {
			t.Fatalf("served %v\nstored %v", want, stored)
		}
		out := &probeWriter{probe: func() int64 { return a.queueLen(t, tn) }}
		code, stderr := a.consume(ctx, out, nil, "--url", a.base, "--token", tn.token, "--once")
		if code != 0 || stderr != "" {
			t.Fatalf("exit %d, stderr %q", code, stderr)
		}
		if got := out.String(); got != strings.Join(want, "\n")+"\n" {
			t.Fatalf("stdout\n%s\nwant the served events, one per line:\n%s", got, strings.Join(want, "\n"))
		}
		if len(out.queueAtWrite) != 1 || out.queueAtWrite[0] != 3 {
			t.Errorf("queue lengths when stdout was written: %v, want [3] (one flush, before the trim)", out.queueAtWrite)
		}
		if n := a.queueLen(t, tn); n != 0 {
			t.Errorf("queue length %d after consume --once, want 0", n)
		}
	})

	t.Run("prints nothing and exits 0 on an empty queue", func(t *testing.T) {
		a := api
		tn := a.mustTenant(t)
		var out bytes.Buffer
		code, stderr := a.consume(ctx, &out, nil, "--url", a.base, "--token", tn.token, "--once")
		if code != 0 || stderr != "" || out.Len() != 0 {
			t.Fatalf("exit %d, stdout %q, stderr %q", code, out.String(), stderr)
		}
	})

	t.Run("takes url and token from the environment, flags first", func(t *testing.T) {
		a := api
		tn := a.mustTenant(t)
		a.track(t, tn, "s-1", 2)
		var out bytes.Buffer
		environ := []string{"EVENTQ_URL=" + a.base, "EVENTQ_TOKEN=999999|overridden"}
		code, stderr := a.consume(ctx, &out, environ, "--token", tn.token, "--once")
		if code != 0 || stderr != "" || strings.Count(out.String(), "\n") != 2 || a.queueLen(t, tn) != 0 {
			t.Fatalf("exit %d, stdout %q, stderr %q, queue %d", code, out.String(), stderr, a.queueLen(t, tn))
		}
		a.track(t, tn, "s-2", 1)
		out.Reset()
		code, stderr = a.consume(ctx, &out, []string{"EVENTQ_URL=" + a.base, "EVENTQ_TOKEN=" + tn.token}, "--once")
		if code != 0 || stderr != "" || strings.Count(out.String(), "\n") != 1 {
			t.Fatalf("env only: exit %d, stdout %q, stderr %q", code, out.String(), stderr)
		}
	})

	t.Run("a bad token exits 1 with the API's message and prints nothing", func(t *testing.T) {
		a := api
		var out bytes.Buffer
		code, stderr := a.consume(ctx, &out, nil, "--url", a.base, "--token", "999999|wrong")
		if code != 1 || out.Len() != 0 || !strings.Contains(stderr, "401") || !strings.Contains(stderr, "Unauthenticated.") {
			t.Fatalf("exit %d, stdout %q, stderr %q", code, out.String(), stderr)
		}
	})

	t.Run("without a url it exits 1", func(t *testing.T) {
		a := api
		var out bytes.Buffer
		code, stderr := a.consume(ctx, &out, nil, "--token", "1|x")
		if code != 1 || out.Len() != 0 || !strings.Contains(stderr, "--url") {
			t.Fatalf("exit %d, stdout %q, stderr %q", code, out.String(), stderr)
		}
	})

	t.Run("a failed write keeps the batch in the queue", func(t *testing.T) {
		a := api
		tn := a.mustTenant(t)
		a.track(t, tn, "s-1", 2)
		code, stderr := a.consume(ctx, failingWriter{}, nil, "--url", a.base, "--token", tn.token, "--once")
		if code != 1 || !strings.Contains(stderr, "disk full") || a.queueLen(t, tn) != 2 {
			t.Fatalf("exit %d, stderr %q, queue %d", code, stderr, a.queueLen(t, tn))
		}
	})

	t.Run("--once exits 0 without printing or trimming when already cancelled", func(t *testing.T) {
		a := api
		tn := a.mustTenant(t)
		a.track(t, tn, "s-1", 2)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		var out bytes.Buffer
		code, stderr := a.consume(cctx, &out, nil, "--url", a.base, "--token", tn.token, "--once")
		if code != 0 || stderr != "" || out.Len() != 0 || a.queueLen(t, tn) != 2 {
			t.Fatalf("exit %d, stdout %q, stderr %q, queue %d", code, out.String(), stderr, a.queueLen(t, tn))
		}
	})

	t.Run("runs until cancelled, printing every batch", func(t *testing.T) {
		a := api
		tn := a.mustTenant(t)
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		var out testenv.SyncBuffer
		done := make(chan int, 1)
		go func() {
			code, _ := a.consume(cctx, &out, []string{"EVENTQ_URL=" + a.base, "EVENTQ_TOKEN=" + tn.token})
			done <- code
		}()
		var want []string
		for i, n := range []int{3, 1, 4} {
			want = append(want, a.track(t, tn, fmt.Sprintf("s-%d", i), n)...)
			testenv.Eventually(t, 10*time.Second, "the batch is printed and trimmed", func() bool {
				return strings.Count(out.String(), "\n") == len(want) && a.queueLen(t, tn) == 0
			})
		}
		cancel()
		select {
		case code := <-done:
			if code != 0 {
				t.Fatalf("exit %d after cancel", code)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("consume did not stop within 5s of cancel")
		}
		if got := out.String(); got != strings.Join(want, "\n")+"\n" {
			t.Fatalf("stdout\n%s\nwant\n%s", got, strings.Join(want, "\n"))
		}
	})

	t.Run("the binary exits 0 on SIGINT and SIGTERM", func(t *testing.T) {
		a := api
		for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
			tn := a.mustTenant(t)
			a.track(t, tn, "s-1", 2)
			want := a.served(t, tn)
			cmd := exec.Command(filepath.Join(bins, "eventq"), "consume")
			cmd.Env = []string{"EVENTQ_URL=" + a.base, "EVENTQ_TOKEN=" + tn.token}
			var out, errOut testenv.SyncBuffer
			cmd.Stdout, cmd.Stderr = &out, &errOut
			cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			testenv.Eventually(t, 10*time.Second, "the events are printed and trimmed", func() bool {
				return out.String() == strings.Join(want, "\n")+"\n" && a.queueLen(t, tn) == 0
			})
			cmd.Process.Signal(sig)
			if err := cmd.Wait(); err != nil {
				t.Fatalf("%v: %v, stderr %q; want exit 0", sig, err, errOut.String())
			}
		}
	})

	t.Run("shared", func(t *testing.T) { testConsumeShared(t, api, bins) })
}

// probeWriter is stdout that records, at each write, what probe returns (the queue length).
type probeWriter struct {
	bytes.Buffer
	probe        func() int64
	queueAtWrite []int64
}

func (w *probeWriter) Write(p []byte) (int, error) {
	w.queueAtWrite = append(w.queueAtWrite, w.probe())
	return w.Buffer.Write(p)
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }
