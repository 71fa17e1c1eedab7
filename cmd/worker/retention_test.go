package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/eventq/eventq/internal/clock"
	"github.com/eventq/eventq/internal/config"
	"github.com/eventq/eventq/internal/database"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/models"
)

// A worker that starts creates the partitions of the day before its clock's day to seven days
// after it, before any maintenance run (Postgres).
func TestWorkerCreatesPartitionsAheadWhenItStarts(t *testing.T) {
	r := testenv.StartRedis(t)
	db, dbURL := testenv.DB(t)
	if !database.IsPostgres(db) {
		t.Skip("day partitions exist on Postgres only")
	}
	later := time.Now().UTC().AddDate(0, 0, 60) // no partition exists this far ahead
	cfg, err := config.Load([]string{"DATABASE_URL=" + dbURL, "REDIS_URL=" + r.URL(), "WORKER_METRICS_ADDR=127.0.0.1:0"})
	testenv.Must(t, err)
	m := NewMain(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	m.Clock = clock.NewFake(later)
	testenv.Must(t, m.Open())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx) }()
	defer func() { cancel(); <-done }()

	want := map[string]bool{}
	for d := -1; d <= database.PartitionsAhead; d++ {
		want[database.PartitionName(database.Day(later.AddDate(0, 0, d)))] = true
	}
	testenv.Eventually(t, 10*time.Second, "the partitions ahead exist", func() bool {
		parts, err := database.Partitions(context.Background(), db)
		n := 0
		for _, p := range parts {
			if want[p.Name] {
				n++
			}
		}
		return err == nil && n == len(want)
	})
	testenv.Eventually(t, 10*time.Second, "the metrics count them", func() bool {
		return sumMetric(t, []*Main{m}, "eventq_event_partitions_created_total") == float64(len(want))
	})
}

// Two workers with EVENT_PRUNE_INTERVAL=1s apply the retention once per second between them:
// the events of the days before the cutoff are deleted, those after are kept, and the runs
// and deleted events counted over both workers show no window ran twice.
func TestWorkersPruneOncePerInterval(t *testing.T) {
	r := testenv.StartRedis(t)
	db, dbURL := testenv.DB(t)
	ctx := context.Background()
	tenant := testenv.MustTenant(t, db, false).ID
	now := time.Now().UTC()
	_, err := database.EnsurePartitions(ctx, db, now.AddDate(0, 0, -12), now)
	testenv.Must(t, err)
	var old, kept int
	for d, n := range map[int]int{-20: 3, -10: 5, -5: 4, -2: 6, 0: 2} { // days ago: events
		for i := 0; i < n; i++ {
			ev := models.TrackedEvent{ID: fmt.Sprintf("01a20000-0000-7000-8000-%06d%06d", -d, i), TenantID: tenant, Type: "page_view",
				SessionID: "s", URL: "https://a.example/", PageHostname: "a.example", PagePath: "/", UserAgent: "ua",
				IPAddress: "203.0.113.7", CreatedAt: now.AddDate(0, 0, d)}
			testenv.Must(t, db.Create(&ev).Error)
		}
		if d < -4 {
			old += n
		} else {
			kept += n
		}
	}

	cfg, err := config.Load([]string{"DATABASE_URL=" + dbURL, "REDIS_URL=" + r.URL(), "WORKER_METRICS_ADDR=127.0.0.1:0",
		"EVENT_RETENTION=3d", "EVENT_PRUNE_INTERVAL=1s"})
	testenv.Must(t, err)
	start := time.Now()
	workers := []*Main{startWorker(t, cfg), startWorker(t, cfg)}
	okRuns := `eventq_events_prune_runs_total{outcome="ok"}`
	// A run on Citus drops distributed partitions, seconds each on a busy machine: the wait is
	// for three runs, however long they take; the check below is of how many windows had one.
	testenv.Eventually(t, 120*time.Second, "three runs succeed", func() bool { return sumMetric(t, workers, okRuns) >= 3 })
	runs := sumMetric(t, workers, okRuns)
	windows := time.Now().Unix() - start.Unix() + 1
	if runs > float64(windows) {
		t.Errorf("%v runs in %d one-second windows: more than one per window", runs, windows)
	}
	var left int64
	testenv.Must(t, db.Model(&models.TrackedEvent{}).Count(&left).Error)
	if left != int64(kept) {
		t.Errorf("%d events left, want the %d of the last days", left, kept)
	}
	if v := sumMetric(t, workers, "eventq_events_pruned_total"); v != float64(old) {
		t.Errorf("eventq_events_pruned_total over the workers = %v, want %d", v, old)
	}
	oldest := max(sumMetric(t, workers[:1], "eventq_events_oldest_age_seconds"), sumMetric(t, workers[1:], "eventq_events_oldest_age_seconds"))
	if oldest < 2*24*3600 || oldest > 2*24*3600+60 {
		t.Errorf("oldest event age %v s (max over the workers), want 2 days", oldest)
	}
}
