package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/eventq/eventq/internal/clock"
	"github.com/eventq/eventq/internal/config"
	"github.com/eventq/eventq/internal/eventqueue"
	"github.com/eventq/eventq/internal/features"
	"github.com/eventq/eventq/internal/psp"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/models"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// The real worker connects, registers with asynq, runs the scheduled requeue job that pushes an
// event whose append failed, and stops cleanly on cancel.
func TestWorkerRequeuesPendingEventsAndStopsCleanly(t *testing.T) {
	r := testenv.StartRedis(t)
	db, dbURL := testenv.DB(t)
	tn := models.Tenant{Name: "Shop", SiteKey: "site_w"}
	db.Create(&tn)
	if err := features.New(db, clock.Real{}).Set(context.Background(), features.UseQueueEvents, tn.ID, true); err != nil {
		t.Fatal(err)
	}
	ev := models.TrackedEvent{ID: "01a20000-0000-7000-8000-000000000001", TenantID: tn.ID, Type: "page_view",
		SessionID: "s", URL: "https://a.example/", PageHostname: "a.example", PagePath: "/",
		UserAgent: "ua", IPAddress: "127.0.0.1", EventSequence: 1, QueuePending: true,
		CreatedAt: time.Now().UTC().Add(-time.Minute)}
	if err := db.Create(&ev).Error; err != nil {
		t.Fatal(err)
	}

	cfg, err := config.Load([]string{"DATABASE_URL=" + dbURL, "REDIS_URL=" + r.URL(), "WORKER_METRICS_ADDR=127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	m := NewMain(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err := m.Open(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()

	inspector := asynq.NewInspectorFromRedisClient(r.Client())
	testenv.Eventually(t, 10*time.Second, "the worker registers with asynq", func() bool {
		servers, err := inspector.Servers()
		return err == nil && len(servers) == 1
	})
	queue := eventqueue.New(r.Client())
	testenv.Eventually(t, 30*time.Second, "the scheduled job pushes the pending event", func() bool {
		n, _ := queue.Len(context.Background(), tn.ID)
		return n == 1
	})
	testenv.Eventually(t, 5*time.Second, "the pushed event's pending mark is cleared", func() bool {
		var row models.TrackedEvent
		return db.Take(&row, "id = ?", ev.ID).Error == nil && !row.QueuePending
	})
	t.Run("serves its metrics on WORKER_METRICS_ADDR", func(t *testing.T) {
		res, err := http.Get("http://" + m.MetricsAddr() + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		for _, want := range []string{"eventq_events_queued_total 1", `asynq_queue_size{queue="default"`} {
			if !strings.Contains(string(body), want) {
				t.Errorf("worker metrics lack %q", want)
			}
		}
	})

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("worker did not stop within 15s")
	}
	testenv.Eventually(t, 10*time.Second, "the worker deregisters", func() bool {
		servers, err := inspector.Servers()
		return err == nil && len(servers) == 0
	})
}

// Two workers with PSP_RECONCILE_INTERVAL=1s reconcile once per second between them: a paid
// session whose delivery never came is fulfilled once, and the metrics show the runs.
func TestWorkersReconcileOncePerInterval(t *testing.T) {
	r := testenv.StartRedis(t)
	db, dbURL := testenv.DB(t)
	fake := testenv.StartFakePSP(t)
	account := "acct_worker"
	tn := models.Tenant{Name: "Shop", SiteKey: "site_rec", PSPAccountID: &account}
	testenv.Must(t, db.Create(&tn).Error)
	member := models.AudienceMember{TenantID: tn.ID, Email: "m@example.com"}
	testenv.Must(t, db.Create(&member).Error)
	product := models.Product{TenantID: tn.ID, Name: "Course", Amount: 1999, Currency: "usd"}
	testenv.Must(t, db.Create(&product).Error)
	cs := fake.AddSession(account, psp.SessionObject{
		AmountTotal: 1999, Currency: "usd", Mode: "payment", PaymentStatus: "unpaid", Status: "open",
		Metadata: map[string]string{"tenant_id": models.FormatID(tn.ID), "audience_member_id": models.FormatID(member.ID),
			"product_id": models.FormatID(product.ID)},
	})
	fake.Complete(cs.ID)

	cfg, err := config.Load([]string{"DATABASE_URL=" + dbURL, "REDIS_URL=" + r.URL(), "WORKER_METRICS_ADDR=127.0.0.1:0",
		"PSP_SECRET_KEY=sk_test_worker", "PSP_API_BASE=" + fake.URL, "PSP_RECONCILE_INTERVAL=1s"})
	testenv.Must(t, err)
	start := time.Now()
	var workers []*Main
	for i := 0; i < 2; i++ {
		workers = append(workers, startWorker(t, cfg))
	}
	metric := func(name string) float64 { return sumMetric(t, workers, name) }
	okRuns := `eventq_psp_reconcile_runs_total{outcome="ok"}`
	testenv.Eventually(t, 20*time.Second, "the missed session is fulfilled", func() bool {
		var n int64
		db.Model(&models.Purchase{}).Where("psp_checkout_session_id = ?", cs.ID).Count(&n)
		return n == 1
	})
	testenv.Eventually(t, 20*time.Second, "three runs succeed", func() bool { return metric(okRuns) >= 3 })
	runs := metric(okRuns)
	windows := time.Now().Unix() - start.Unix() + 1
	if runs > float64(windows) {
		t.Errorf("%v runs in %d one-second windows: more than one per window", runs, windows)
	}
	if v := metric("eventq_psp_reconcile_missing_events_total"); v != 1 {
		t.Errorf("missing events %v across the workers, want 1", v)
	}
	if v := metric("eventq_psp_reconcile_last_success_timestamp_seconds"); v < float64(start.Unix()) {
		t.Errorf("last success %v, want after %d", v, start.Unix())
	}
	var n int64
	testenv.Must(t, db.Model(&models.Purchase{}).Count(&n).Error)
	if n != 1 {
		t.Errorf("%d purchases, want 1", n)
	}
}

// An Open that fails at its last step (the metrics address is taken) closes what it had
// opened: the database and Redis connections.
func TestFailedOpenClosesWhatItOpened(t *testing.T) {
	r := testenv.StartRedis(t)
	_, dbURL := testenv.DB(t)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	cfg, err := config.Load([]string{"DATABASE_URL=" + dbURL, "REDIS_URL=" + r.URL(), "WORKER_METRICS_ADDR=" + taken.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	m := NewMain(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err := m.Open(); err == nil || !strings.Contains(err.Error(), "WORKER_METRICS_ADDR") {
		t.Fatalf("Open = %v, want the metrics address refused", err)
	}
	if m.App != nil {
		t.Fatal("a failed Open left its connections open")
	}
	clients, err := r.Client().ClientList(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(clients, "\n"); n > 1 { // this one
		t.Fatalf("%d Redis connections left after a failed Open:\n%s", n, clients)
	}
}

// startWorker opens and runs a worker on cfg until the test ends.
// sumMetric is the sum of a metric's sample (name with its labels, as exported) over workers.
func sumMetric(t *testing.T, workers []*Main, name string) float64 {
	t.Helper()
	var sum float64
	for _, m := range workers {
		res, err := http.Get("http://" + m.MetricsAddr() + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		for _, line := range strings.Split(string(body), "\n") {
			if v, ok := strings.CutPrefix(line, name+" "); ok {
				f, _ := strconv.ParseFloat(v, 64)
				sum += f
			}
		}
	}
	return sum
}

func startWorker(t *testing.T, cfg config.Config) *Main {
	t.Helper()
	m := NewMain(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	testenv.Must(t, m.Open())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return m
}
