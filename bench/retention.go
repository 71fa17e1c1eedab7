package main

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// Retention is scenario 11, stored events that stay bounded (issue 19): ingestion while a
// prune deletes old days against the same ingestion without one, on Postgres (day partitions
// dropped) and SQLite (batched deletes); dropping a day partition against DELETE of an
// identical day; inserts into the partitioned table against an unpartitioned copy;
// events export; and the migration of an unpartitioned database.
type Retention struct {
	Prune        []*PruneUnderLoad  `json:"prune_under_load"`
	DropVsDelete *DropVsDelete      `json:"drop_vs_delete"`
	Insert       *PartitionedInsert `json:"partitioned_insert"`
	Export       []*ExportRun       `json:"export"`
	Migration    *MigrationCost     `json:"migration"`
	NotMeasured  []string           `json:"not_measured,omitempty"`
}

// retentionPlan is how large and how long the retention scenario runs.
type retentionPlan struct {
	rate          float64       // offered POST /api/track requests/s, 1 event each
	loadFor       time.Duration // the first run without a prune; the others last as long as the run with one
	lead          time.Duration // load before the prune starts
	tail          time.Duration // load after the prune returns
	maxFor        time.Duration // the run with a prune stops sending after this
	pruneDays     int           // old days filled for each prune
	perDay        int           // events per pruned day, Postgres
	sqlitePerDay  int           // events per pruned day, SQLite
	dropRows      int           // events of the day dropped, and of the day deleted
	exportRows    int           // events of the large export; the small one has exportSmall
	migrateRows   int           // events of the unpartitioned database migrated
	migrateDays   int           // days they span
	insertFor     time.Duration // each insert-rate measure
	insertTurns   int           // turns of partitioned / unpartitioned, the best of each counts
	insertConns   int
	insertBatch   int
	pruneKeepDays int
	pruneOnly     bool // only the prunes under load (-only prune): no drop vs DELETE, inserts, export or migration
}

var (
	fullRetention = retentionPlan{
		rate: 1000, loadFor: 10 * time.Second, lead: 2 * time.Second, tail: 2 * time.Second, maxFor: 3 * time.Minute,
		pruneDays: 3, perDay: 400_000, sqlitePerDay: 334_000, dropRows: 1_000_000,
		exportRows: 1_000_000, migrateRows: 1_000_000, migrateDays: 30,
		insertFor: 3 * time.Second, insertTurns: 2, insertConns: 8, insertBatch: 100, pruneKeepDays: 3,
	}
	quickRetention = retentionPlan{
		rate: 1000, loadFor: 2 * time.Second, lead: 500 * time.Millisecond, tail: 500 * time.Millisecond, maxFor: 30 * time.Second,
		pruneDays: 3, perDay: 20_000, sqlitePerDay: 20_000, dropRows: 100_000,
		exportRows: 100_000, migrateRows: 200_000, migrateDays: 30,
		insertFor: 300 * time.Millisecond, insertTurns: 1, insertConns: 8, insertBatch: 100, pruneKeepDays: 3,
	}
)

// benchRetention runs the retention scenario: on its own Postgres database with an api and a
// worker, then on its own SQLite file.
func benchRetention(ctx context.Context, s *stack, rp retentionPlan) (*Retention, error) {
	res := &Retention{}
	url, err := s.postgresDatabase("retention")
	if err != nil {
		return nil, err
	}
	if err := s.startServices(ctx, url); err != nil {
		return nil, err
	}
	if rp.pruneOnly {
		var pr *PruneUnderLoad
		pr, err = benchPruneUnderLoad(ctx, s, rp, rp.perDay)
		res.Prune = append(res.Prune, pr)
	} else {
		err = benchRetentionPostgres(ctx, s, rp, res)
	}
	s.stopServices()
	if err != nil {
		return nil, err
	}
	if !rp.pruneOnly {
		s.logf("retention: migration of an unpartitioned database of %d events", rp.migrateRows)
		if res.Migration, err = benchMigration(ctx, s, rp); err != nil {
			return nil, err
		}
	}

	if err := s.startServices(ctx, s.sqliteDatabase("retention")); err != nil {
		return nil, err
	}
	defer s.stopServices()
	pr, err := benchPruneUnderLoad(ctx, s, rp, rp.sqlitePerDay)
	if err != nil {
		return nil, err
	}
	res.Prune = append(res.Prune, pr)
	return res, nil
}

func benchRetentionPostgres(ctx context.Context, s *stack, rp retentionPlan, res *Retention) error {
	pr, err := benchPruneUnderLoad(ctx, s, rp, rp.perDay)
	if err != nil {
		return err
	}
	res.Prune = append(res.Prune, pr)
	s.logf("retention: drop a day partition of %d events vs DELETE of an identical day", rp.dropRows)
	if res.DropVsDelete, err = benchDropVsDelete(ctx, s, rp); err != nil {
		return err
	}
	s.logf("retention: inserts into the partitioned table vs an unpartitioned copy (%s each, %d turns)", rp.insertFor, rp.insertTurns)
	if res.Insert, err = benchPartitionedInsert(ctx, s, rp); err != nil {
		return err
	}
	s.logf("retention: events export of %d and %d events, jsonl and parquet", exportSmall, rp.exportRows)
	res.Export, err = benchExport(ctx, s, rp)
	if err != nil {
		if ctx.Err() != nil {
			return err
		}
		s.logf("  export not measured: %v", err)
		res.NotMeasured = append(res.NotMeasured, "export: "+err.Error())
	}
	return nil
}

// rows adds the scenario's lines to the table.
func (r *Retention) rows(add func(scenario, metric string, value float64, floor, ratio *float64, target string, met *bool)) {
	f := func(v float64) *float64 { return &v }
	b := func(v bool) *bool { return &v }
	for _, p := range r.Prune {
		name := fmt.Sprintf("prune %s, %s events, %.0f req/s", p.Database, count(p.Filled), p.RequestsPerSec)
		add(name, "ingest p99 ms during prune (floor: alone, better of 2)", p.During.Latency.P99, f(p.BaselineP99), f(p.P99Ratio),
			fmt.Sprintf("≤ %.1f×", p.TargetRatio), b(p.P99Ratio <= p.TargetRatio))
		if len(p.Alone) > 1 { // how much two runs without a prune differ: the noise of the ratio above
			add(name, "ingest p99 ms alone, after (beside: before)", p.Alone[1].Latency.P99, f(p.Alone[0].Latency.P99),
				f(p.Alone[1].Latency.P99/p.Alone[0].Latency.P99), "", nil)
		}
		add(name, "ingest failed + dropped during prune", float64(p.During.Failed+p.During.Dropped), nil, nil, "0",
			b(p.During.Failed+p.During.Dropped == 0))
		alone := p.Alone[0].EventsPerSec
		if len(p.Alone) > 1 {
			alone = max(alone, p.Alone[1].EventsPerSec)
		}
		add(name, "ingest events/s during prune (beside: alone)", p.During.EventsPerSec, f(alone), f(p.During.EventsPerSec/alone), "", nil)
		maxAlone := p.Alone[0].Latency.Max
		if len(p.Alone) > 1 {
			maxAlone = min(maxAlone, p.Alone[1].Latency.Max)
		}
		add(name, "ingest p99 ms while the prune ran +1 s (beside: alone)", p.Window.P99, f(p.BaselineP99), f(p.Window.P99/p.BaselineP99), "", nil)
		add(name, "ingest max ms during prune (beside: alone)", p.During.Latency.Max, f(maxAlone), f(p.During.Latency.Max/maxAlone), "", nil)
		add(name, fmt.Sprintf("prune seconds (%s)", p.Method), p.PruneSeconds, nil, nil, "", nil)
		add(name, "stored bytes per event, indexes included", p.BytesPerEvent, nil, nil, "", nil)
		add(name, "events deleted (beside: in the pruned days)", float64(p.Deleted), f(float64(p.Filled)), f(float64(p.Deleted)/float64(p.Filled)), "", nil)
		if p.Database == "sqlite" {
			add(name, "database file MiB after prune (beside: before)", p.FileMiBAfter, f(p.FileMiBBefore), f(p.FileMiBAfter/p.FileMiBBefore), "", nil)
		}
	}
	if d := r.DropVsDelete; d != nil {
		name := fmt.Sprintf("drop a day of %s events, postgres", count(d.Rows))
		add(name, "drop partition s (beside: DELETE the same day)", d.DropSeconds, f(d.DeleteSeconds), f(d.Ratio), "", nil)
		both := d.DeleteSeconds + d.VacuumSeconds
		add(name, "drop partition s (beside: DELETE + its VACUUM)", d.DropSeconds, f(both), f(d.DropSeconds/both), "", nil)
	}
	if in := r.Insert; in != nil {
		name := fmt.Sprintf("insert partitioned, %d-row × %d conn", in.RowsPerInsert, in.Conns)
		add(name, "rows/s (floor: unpartitioned copy)", maxOf(in.Partitioned), f(maxOf(in.Unpartitioned)), f(in.Ratio),
			fmt.Sprintf("≥ %.2f×", in.Target), b(in.Met))
		add(name, "rows/s + BRIN(created_at) (beside: + B-tree)", in.WithBRIN, f(in.WithBTree), f(in.WithBRIN/in.WithBTree), "", nil)
		add(name, "rows/s + B-tree(created_at) (beside: no extra index)", in.WithBTree, f(maxOf(in.Partitioned)), f(in.WithBTree/maxOf(in.Partitioned)), "", nil)
	}
	var small, large = map[string]*ExportRun{}, map[string]*ExportRun{}
	for _, e := range r.Export {
		if e.Events == exportSmall {
			small[e.Format] = e
		} else {
			large[e.Format] = e
		}
	}
	for _, format := range []string{"jsonl", "parquet"} {
		l, sm := large[format], small[format]
		if l == nil || sm == nil {
			continue
		}
		name := fmt.Sprintf("export %s", format)
		add(name, fmt.Sprintf("events/s, %s events to /dev/null", count(int64(l.Events))), l.EventsPerSec, nil, nil, "", nil)
		add(name, fmt.Sprintf("peak RSS MiB, %s events (beside: %s)", count(int64(l.Events)), count(int64(sm.Events))), l.PeakRSSMiB, f(sm.PeakRSSMiB),
			f(l.PeakRSSMiB/sm.PeakRSSMiB), "", nil)
	}
	if m := r.Migration; m != nil {
		name := fmt.Sprintf("migrate unpartitioned, %s events", count(m.Rows))
		add(name, fmt.Sprintf("seconds per million rows (%d days)", m.Days), m.SecondsPerMillion, nil, nil, "", nil)
		add(name, "seconds", m.Seconds, nil, nil, "", nil)
	}
}

// count formats a number of events: 60k, 1.2M.
func count(n int64) string {
	if n >= 1_000_000 {
		return strconv.FormatFloat(float64(n)/1e6, 'f', -1, 64) + "M"
	}
	return strconv.FormatFloat(float64(n)/1e3, 'f', -1, 64) + "k"
}
