package main

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/eventq/eventq/internal/database"
	"github.com/eventq/eventq/models"
)

// checkpointPlan is how the checkpoint scenario runs: turns of each loop, alternating, each committing
// commits transactions of rows rows at perSecond a second.
type checkpointPlan struct {
	turns, commits, rows, perSecond int
}

const (
	// oldCheckpointEvery is the checkpoint loop's interval of earlier versions, the baseline.
	oldCheckpointEvery = 200 * time.Millisecond
	// checkpointChunk is the rows of one INSERT, as in the api's SQLite inserts.
	checkpointChunk = 100
)

// CheckpointTail is the checkpoint scenario: how long SQLite commits of tracked_events rows take while
// the checkpoint loop copies the log into the database file beside them, with the service's
// loop and with the old one (a passive checkpoint every 200 ms), in alternating turns on one
// database file. Without the api, Redis or the load generator, the commits are the writer's
// own: what the loop's syncs leave of them is what ingestion's one SQLite writer waits for.
type CheckpointTail struct {
	Rows      int     `json:"rows_per_commit"`
	PerSecond int     `json:"commits_per_second"`
	Turns     int     `json:"turns_each"`
	Loop      Latency `json:"loop"`        // every commit of the turns with the service's loop
	Every200  Latency `json:"every_200ms"` // and with the old one
}

// benchCheckpoint runs the checkpoint scenario on an SQLite file of its own.
func benchCheckpoint(ctx context.Context, s *stack, p checkpointPlan) (*CheckpointTail, error) {
	db, err := database.Open(s.sqliteDatabase("checkpoint"))
	if err != nil {
		return nil, err
	}
	defer database.Close(db)
	if err := database.Migrate(db); err != nil {
		return nil, err
	}
	t := models.Tenant{Name: "Bench checkpoint", SiteKey: "site_bench_checkpoint"}
	if err := db.WithContext(ctx).Create(&t).Error; err != nil {
		return nil, err
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, err
	}
	stmt, err := sqlDB.PrepareContext(ctx, insertSQL(checkpointChunk, false))
	if err != nil {
		return nil, err
	}
	defer stmt.Close()

	var loop, old []time.Duration
	row := 0
	for turn := 0; turn < 2*p.turns; turn++ {
		isOld := turn%2 == 1
		every := time.Duration(0) // the service's loop
		if isOld {
			every = oldCheckpointEvery
		}
		if err := checkpointEvery(db, every); err != nil {
			return nil, err
		}
		lat, err := commitTurn(ctx, sqlDB, stmt, p, t.ID, &row)
		if err != nil {
			return nil, err
		}
		sum := summarize(lat)
		s.logf("  checkpoint %s, turn %d: commit p50 %.2f ms, p99 %.2f ms, max %.2f ms",
			map[bool]string{false: "loop", true: "every 200 ms"}[isOld], turn/2+1, sum.P50, sum.P99, sum.Max)
		if isOld {
			old = append(old, lat...)
		} else {
			loop = append(loop, lat...)
		}
	}
	return &CheckpointTail{Rows: p.rows, PerSecond: p.perSecond, Turns: p.turns, Loop: summarize(loop), Every200: summarize(old)}, nil
}

// commitTurn commits p.commits transactions of p.rows rows of tenantID, p.perSecond a second,
// each as p.rows/checkpointChunk executions of stmt (a multi-row INSERT), and returns how long each took
// from its BEGIN to its COMMIT. *row numbers the rows across turns.
func commitTurn(ctx context.Context, db *sql.DB, stmt *sql.Stmt, p checkpointPlan, tenantID uint64, row *int) ([]time.Duration, error) {
	tick := time.NewTicker(time.Second / time.Duration(p.perSecond))
	defer tick.Stop()
	args := make([]any, 0, 13*checkpointChunk)
	lat := make([]time.Duration, 0, p.commits)
	for range p.commits {
		select {
		case <-tick.C:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		start := time.Now()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return nil, err
		}
		now := time.Now().UTC()
		for range p.rows / checkpointChunk {
			args = args[:0]
			for range checkpointChunk {
				args = rowValues(args, tenantID, *row%1_000_000, now)
				*row++
			}
			if _, err := tx.StmtContext(ctx, stmt).ExecContext(ctx, args...); err != nil {
				tx.Rollback()
				return nil, fmt.Errorf("checkpoint: insert: %w", err)
			}
		}
		if err := tx.Commit(); err != nil {
			return nil, fmt.Errorf("checkpoint: commit: %w", err)
		}
		lat = append(lat, time.Since(start))
	}
	return lat, nil
}

// rows adds the checkpoint scenario to the table.
func (c *CheckpointTail) rows(add func(scenario, metric string, value float64, floor, ratio *float64, target string, met *bool)) {
	f := func(v float64) *float64 { return &v }
	name := fmt.Sprintf("sqlite commits of %d rows, %d/s", c.Rows, c.PerSecond)
	add(name, "max ms, checkpoint loop (beside: every 200 ms, as before)", c.Loop.Max, f(c.Every200.Max), f(c.Loop.Max/c.Every200.Max), "", nil)
	add(name, "p99 ms (beside: every 200 ms)", c.Loop.P99, f(c.Every200.P99), f(c.Loop.P99/c.Every200.P99), "", nil)
	add(name, "p50 ms (beside: every 200 ms)", c.Loop.P50, f(c.Every200.P50), f(c.Loop.P50/c.Every200.P50), "", nil)
}
