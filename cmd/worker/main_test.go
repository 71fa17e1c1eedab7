package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/eventq/eventq/internal/config"
	"github.com/eventq/eventq/internal/eventqueue"
	"github.com/eventq/eventq/internal/features"
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
	if err := features.New(db).Set(context.Background(), features.UseQueueEvents, tn.ID, true); err != nil {
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
