package delivery

import (
	"context"
	"testing"
	"time"

	"github.com/eventq/eventq/internal/database"
	"github.com/eventq/eventq/internal/testenv"
)

// A held tenant's drain (the end of a rebuild) takes every one of the tenant's pending events
// before it releases the hold, also those a pass over every tenant has locked because it read
// them before it learnt that the tenant was held: it waits for that pass instead of taking the
// short read for the end of the backlog (make bench, 2026-11-27: restored 100,000, queue held
// 99,598). SQLite has one writer and no row locks: Postgres only.
func TestAHeldDrainWaitsForEventsAnotherPassLocked(t *testing.T) {
	e := startIngest(t)
	if !database.IsPostgres(e.DB) {
		t.Skip("row locks of concurrent re-pushers: Postgres only (SQLite has one writer)")
	}
	ctx := context.Background()
	tenant := testenv.MustTenant(t, e.DB, true).ID
	rows := e.pendingRows(t, tenant, 7)
	// The rebuild's hold, as consume.Service.Rebuild leaves it before its drain.
	testenv.Must(t, e.Queue.BeginRebuild(ctx, tenant, 0))
	testenv.Must(t, e.Queue.EndRebuild(ctx, tenant))

	pass := e.DB.Begin() // the pass over every tenant, holding what it read
	testenv.Must(t, pass.Error)
	defer pass.Rollback()
	var locked []string
	testenv.Must(t, pass.Raw("SELECT id FROM tracked_events WHERE tenant_id = ? AND queue_pending FOR UPDATE", tenant).Scan(&locked).Error)
	if len(locked) != len(rows) {
		t.Fatalf("the pass locked %d events, want %d", len(locked), len(rows))
	}

	done := e.drainHeldAsync(ctx, tenant)
	deadline := time.After(10 * time.Second)
	for waiting := false; !waiting; {
		select {
		case got := <-done:
			t.Fatalf("DrainHeld returned %d, %v while another pass held the events; want it to wait for them", got.n, got.err)
		case <-deadline:
			t.Fatal("the drain neither waited for the locked events nor returned")
		case <-time.After(10 * time.Millisecond):
		}
		var n int64
		testenv.Must(t, e.DB.Raw(`SELECT count(*) FROM `+testenv.StatActivity(t, e.DB)+`
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query ILIKE '%FROM %tracked_events%FOR UPDATE%'`).Scan(&n).Error)
		waiting = n == 1
	}
	testenv.Must(t, pass.Rollback().Error) // the pass skipped the tenant: it was held

	got := <-done
	if got.err != nil || got.n != len(rows) {
		t.Fatalf("DrainHeld = %d, %v; want %d", got.n, got.err, len(rows))
	}
	if n := e.QueueLen(t, tenant); n != int64(len(rows)) {
		t.Errorf("queue holds %d, want %d", n, len(rows))
	}
	if mark, err := e.Queue.HoldMark(ctx, tenant); err != nil || mark != "" {
		t.Errorf("hold mark %q, %v after the drain; want it released", mark, err)
	}
	if n := e.pending(t); n != 0 {
		t.Errorf("%d events still pending, want 0", n)
	}
}

// A rebuild's drain that finds another process draining the tenant (the worker's re-pusher
// holds the held-drain lock) waits for it and drains what is left, so that the queue is
// restored when the rebuild returns (make bench, 2026-11-27: restored 100,000, queue held 0
// when the worker's drain had the lock).
func TestDrainHeldWaitsForAnotherProcesssDrain(t *testing.T) {
	e := startIngest(t)
	ctx := context.Background()
	tenant := testenv.MustTenant(t, e.DB, true).ID
	rows := e.pendingRows(t, tenant, 5)
	testenv.Must(t, e.Queue.BeginRebuild(ctx, tenant, 0))
	testenv.Must(t, e.Queue.EndRebuild(ctx, tenant))
	if ok, err := e.Queue.LockHeldDrain(ctx, tenant, "the worker", time.Minute); err != nil || !ok {
		t.Fatalf("took the held-drain lock: %v, %v", ok, err)
	}
	done := e.drainHeldAsync(ctx, tenant)
	select {
	case got := <-done:
		t.Fatalf("DrainHeld returned %d, %v while another process held the drain; want it to wait", got.n, got.err)
	case <-time.After(5 * heldDrainPoll): // several of its looks at the lock
	}
	testenv.Must(t, e.Queue.UnlockHeldDrain(ctx, tenant, "the worker")) // that drain ends, having pushed nothing
	got := <-done
	if got.err != nil || got.n != len(rows) || e.QueueLen(t, tenant) != int64(len(rows)) {
		t.Fatalf("DrainHeld = %d, %v, queue %d; want all %d pushed", got.n, got.err, e.QueueLen(t, tenant), len(rows))
	}
	if mark, _ := e.Queue.HoldMark(ctx, tenant); mark != "" {
		t.Errorf("hold mark %q after the drain; want it released", mark)
	}
}

// drainOutcome is what one DrainHeld call returned.
type drainOutcome struct {
	n   int
	err error
}

// drainHeldAsync runs DrainHeld for tenant in the background; its outcome arrives on the channel.
func (e *ingestEnv) drainHeldAsync(ctx context.Context, tenant uint64) <-chan drainOutcome {
	done := make(chan drainOutcome, 1)
	go func() {
		n, err := e.Ingest.Delivery().DrainHeld(ctx, tenant)
		done <- drainOutcome{n, err}
	}()
	return done
}
