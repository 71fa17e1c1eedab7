package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/eventq/eventq/internal/clock"
	"github.com/eventq/eventq/internal/database"
	"github.com/eventq/eventq/internal/eventqueue"
	"github.com/eventq/eventq/internal/eventstore"
	"github.com/eventq/eventq/internal/retention"
	"github.com/eventq/eventq/models"
)

// PruneUnderLoad is ingestion at a fixed offered rate while a prune deletes old days, beside
// the same ingestion without a prune, before and after it.
type PruneUnderLoad struct {
	Database          string  `json:"database"`
	Method            string  `json:"method"`
	RequestsPerSec    float64 `json:"offered_requests_per_second"` // 1 event each
	Filled            int64   `json:"events_in_pruned_days"`
	FillEventsPerSec  float64 `json:"fill_events_per_second"`
	Deleted           int64   `json:"deleted"`
	PartitionsDropped int     `json:"partitions_dropped"`
	PruneSeconds      float64 `json:"prune_seconds"`
	// Alone are the runs without a prune, before and after the run with one.
	Alone  []LoadRun `json:"alone"`
	During LoadRun   `json:"during_prune"`
	// Window is the requests due from the prune's start to a second after its end.
	Window      Latency `json:"prune_window"`
	BaselineP99 float64 `json:"baseline_p99_ms"` // the lower of the alone runs' p99
	P99Ratio    float64 `json:"p99_ratio"`       // During.Latency.P99 ÷ BaselineP99
	TargetRatio float64 `json:"target_p99_ratio_max"`
	Met         bool    `json:"met"` // ratio within the target and nothing failed or dropped
	// The SQLite file (with its WAL) before the prune and after it.
	FileMiBBefore float64 `json:"file_mib_before,omitempty"`
	FileMiBAfter  float64 `json:"file_mib_after,omitempty"`
	// BytesPerEvent is the storage of the filled days, indexes included, per event: their
	// partitions on Postgres, the whole file on SQLite.
	BytesPerEvent float64 `json:"stored_bytes_per_event"`
}

// LoadRun is one open-loop run of POST /api/track.
type LoadRun struct {
	Seconds      float64 `json:"seconds"`
	Due          int     `json:"due"`
	OK           int     `json:"ok"`
	Failed       int     `json:"failed"`
	Dropped      int     `json:"dropped"`
	EventsPerSec float64 `json:"events_per_second"`
	Latency      Latency `json:"latency"`
}

func loadRunOf(r loadResult, d time.Duration) LoadRun {
	return LoadRun{Seconds: d.Seconds(), Due: r.Due, OK: r.OK, Failed: r.Failed, Dropped: r.Dropped,
		EventsPerSec: min(r.Achieved, r.Offered), Latency: summarize(r.Lat)}
}

// benchPruneUnderLoad fills rp.pruneDays old days with perDay events each, then runs the
// ingestion alone, with a prune (Keep rp.pruneKeepDays) that deletes those days starting
// rp.lead into it, and alone again.
func benchPruneUnderLoad(ctx context.Context, s *stack, rp retentionPlan, perDay int) (*PruneUnderLoad, error) {
	postgres := strings.HasPrefix(s.dbURL, "postgres")
	res := &PruneUnderLoad{Database: "sqlite", Method: "DELETE in transactions of 500 rows, pausing between, then incremental_vacuum",
		RequestsPerSec: rp.rate, TargetRatio: 1.1}
	if postgres {
		res.Database, res.Method = "postgres", "DROP of day partitions"
	}
	loadTenant, err := s.seedTenant(ctx, "", true)
	if err != nil {
		return nil, err
	}
	oldTenant, err := s.seedTenant(ctx, "", false)
	if err != nil {
		return nil, err
	}
	now := time.Now().UTC()
	newest := database.Day(now).AddDate(0, 0, -10)
	oldest := newest.AddDate(0, 0, -(rp.pruneDays - 1))
	s.logf("retention %s: filling %d days × %d events, %s to %s", res.Database, rp.pruneDays, perDay,
		oldest.Format("2006-01-02"), newest.Format("2006-01-02"))
	started := time.Now()
	for day := oldest; !day.After(newest); day = day.AddDate(0, 0, 1) {
		if err := fillDay(ctx, s, oldTenant.ID, perDay, day); err != nil {
			return nil, err
		}
	}
	res.FillEventsPerSec = float64(rp.pruneDays*perDay) / time.Since(started).Seconds()
	if err := s.db.WithContext(ctx).Model(&models.TrackedEvent{}).Where("created_at < ?", newest.AddDate(0, 0, 1)).
		Count(&res.Filled).Error; err != nil {
		return nil, err
	}
	if err := settleFilled(ctx, s); err != nil {
		return nil, err
	}
	if !postgres {
		res.FileMiBBefore = sqliteFileMiB(s.dbURL)
		res.BytesPerEvent = res.FileMiBBefore * (1 << 20) / float64(res.Filled)
	} else {
		var bytes int64
		err := s.db.WithContext(ctx).Raw(`SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c
			WHERE c.relname >= ? AND c.relname <= ? AND c.relkind = 'r'`, database.PartitionName(oldest), database.PartitionName(newest)).
			Scan(&bytes).Error
		if err != nil {
			return nil, err
		}
		res.BytesPerEvent = float64(bytes) / float64(res.Filled)
	}

	bodies := trackBodies(loadTenant.SiteKey, 1, 64)
	post := func(ctx context.Context, i int) error {
		req := s.request(ctx, "POST", "/api/track", "", bodies[i%len(bodies)])
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("User-Agent", userAgent)
		return expect(s.http, req, 202)
	}
	alone := func(d time.Duration) error {
		stopDisk := sampleDisk(ctx, s)
		r := openLoop{Rate: rp.rate, N: int(rp.rate * d.Seconds()), MaxInFlight: 1024, Do: post}.run(ctx)
		disk := stopDisk()
		if err := ctx.Err(); err != nil {
			return err
		}
		run := loadRunOf(r, d)
		res.Alone = append(res.Alone, run)
		s.logf("  %s alone: %.0f req/s for %.1fs, %.0f events/s, p50 %.1f ms, p99 %.1f ms, max %.1f ms, %d failed, %d dropped",
			res.Database, rp.rate, d.Seconds(), run.EventsPerSec, run.Latency.P50, run.Latency.P99, run.Latency.Max, run.Failed, run.Dropped)
		s.logf("  ingestion p99 ms by second: %.1f", r.p99BySecond())
		logDisk(s, "alone", disk)
		s.rdb.Del(ctx, eventqueue.Key(loadTenant.ID))
		return sleepCtx(ctx, 500*time.Millisecond)
	}
	if err := alone(rp.loadFor); err != nil {
		return nil, err
	}

	// With the prune: the load is sent until the prune has returned and rp.tail more, and at
	// least rp.loadFor; requests already sent are answered whatever happens to the sending.
	pruner := &retention.Pruner{DB: s.db, Events: eventstore.New(s.db), Keep: time.Duration(rp.pruneKeepDays) * 24 * time.Hour, Clock: clock.Real{}}
	sendCtx, stopSending := context.WithCancel(ctx)
	defer stopSending()
	var (
		pruneRes        retention.Result
		pruneErr        error
		pruneAt, pruned time.Duration
		done            = make(chan struct{})
	)
	start := time.Now()
	go func() {
		defer close(done)
		if sleepCtx(sendCtx, rp.lead) != nil {
			pruneErr = sendCtx.Err()
			return
		}
		pruneAt = time.Since(start)
		pruneRes, pruneErr = pruner.Prune(ctx, time.Now(), false)
		pruned = time.Since(start)
		sleepCtx(sendCtx, max(rp.tail, rp.loadFor-pruned))
		stopSending()
	}()
	stopDisk := sampleDisk(ctx, s)
	r := openLoop{Rate: rp.rate, N: int(rp.rate * rp.maxFor.Seconds()), MaxDuration: rp.maxFor, MaxInFlight: 1024,
		Do: func(_ context.Context, i int) error { return post(ctx, i) }}.run(sendCtx)
	<-done
	disk := stopDisk()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if pruneErr != nil {
		return nil, fmt.Errorf("retention %s: prune: %w", res.Database, pruneErr)
	}
	sent := time.Duration(float64(r.Due) / rp.rate * float64(time.Second))
	res.During = loadRunOf(r, sent)
	res.Deleted, res.PartitionsDropped, res.PruneSeconds = pruneRes.Deleted, pruneRes.PartitionsDropped, (pruned - pruneAt).Seconds()
	var window []time.Duration
	for i, at := range r.DueAt {
		if at >= pruneAt && at < pruned+time.Second {
			window = append(window, r.Lat[i])
		}
	}
	res.Window = summarize(window)
	s.logf("  %s with the prune: %.1fs, %.0f events/s, p50 %.1f ms, p99 %.1f ms, max %.1f ms, %d failed, %d dropped; "+
		"prune %.2fs deleted %d (%d partitions), p99 in its window %.1f ms",
		res.Database, sent.Seconds(), res.During.EventsPerSec, res.During.Latency.P50, res.During.Latency.P99, res.During.Latency.Max,
		res.During.Failed, res.During.Dropped, res.PruneSeconds, res.Deleted, res.PartitionsDropped, res.Window.P99)
	s.logf("  ingestion p99 ms by second (the prune from %.1f s to %.1f s): %.1f", pruneAt.Seconds(), pruned.Seconds(), r.p99BySecond())
	logDisk(s, "with the prune", disk)
	s.rdb.Del(ctx, eventqueue.Key(loadTenant.ID))
	if !postgres { // the file as the prune left it, its WAL written back
		if err := quiesce(ctx, s); err != nil {
			return nil, err
		}
		res.FileMiBAfter = sqliteFileMiB(s.dbURL)
	}
	if err := sleepCtx(ctx, 500*time.Millisecond); err != nil {
		return nil, err
	}
	if err := alone(sent); err != nil {
		return nil, err
	}
	res.BaselineP99 = min(res.Alone[0].Latency.P99, res.Alone[1].Latency.P99)
	if res.BaselineP99 > 0 {
		res.P99Ratio = res.During.Latency.P99 / res.BaselineP99
	}
	res.Met = res.P99Ratio <= res.TargetRatio && res.During.Failed == 0 && res.During.Dropped == 0
	return res, nil
}

// quiesce flushes what the fill left to write, so that it does not land in a measurement: a
// checkpoint on Postgres, the WAL into the file on SQLite, then the page cache to the disk.
// Without the last, the kernel wrote the fill back about 30 s later (its dirty_expire), up to
// 400 MiB in one second, in the middle of what was measured.
func quiesce(ctx context.Context, s *stack) error {
	q := "PRAGMA wal_checkpoint(TRUNCATE)"
	if strings.HasPrefix(s.dbURL, "postgres") {
		q = "CHECKPOINT"
	}
	if err := s.db.WithContext(ctx).Exec(q).Error; err != nil {
		return err
	}
	unix.Sync()
	return nil
}

// settleFilled is quiesce after days were filled that a prune or a drop is about to remove. On
// Postgres those days are vacuumed first, as days that old are in production: left to
// autovacuum, it would still be working on them when the prune comes, and its lock on a
// partition outlasts the prune's lock timeout (Postgres cancels an autovacuum that is in the
// way only after deadlock_timeout, 1 s), so the prune would give up.
func settleFilled(ctx context.Context, s *stack) error {
	if strings.HasPrefix(s.dbURL, "postgres") {
		if err := s.db.WithContext(ctx).Exec("VACUUM (ANALYZE) " + database.EventsTable).Error; err != nil {
			return err
		}
	}
	return quiesce(ctx, s)
}
