package consume

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/eventq/eventq/internal/clock"
	"github.com/eventq/eventq/internal/eventqueue"
	"github.com/eventq/eventq/internal/eventstore"
	"github.com/eventq/eventq/internal/features"
	"github.com/eventq/eventq/internal/retention"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/models"
)

// After Redis lost every queue, a rebuild puts back exactly the queued events that were not
// trimmed, in order, with the front offset, ahead of events accepted after the loss; events of
// a tenant whose flag is off are not queued; a second rebuild gives the same queue.
func TestRebuildRestoresTheUntrimmedEventsInOrder(t *testing.T) {
	e := startConsume(t)
	ctx := context.Background()
	trims := NewTrimLog(e.DB, clock.Real{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	defer trims.Close()
	tenant, off := testenv.MustTenant(t, e.DB, true).ID, testenv.MustTenant(t, e.DB, true).ID
	if err := e.Flags.Set(ctx, features.UseQueueEvents, off, false); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for range 6 {
		ids = append(ids, e.mustIngest(t, tenant, 5)...)
	}
	e.mustIngest(t, off, 4)
	e.trimFront(t, trims, tenant, 7)
	e.trimFront(t, trims, tenant, 5)
	if err := trims.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	var front models.QueueFront
	if err := e.DB.Take(&front, "tenant_id = ?", tenant).Error; err != nil || front.Front != 12 || front.TrimmedThrough != ids[11] {
		t.Fatalf("recorded front %+v (%v), want 12 through %s", front, err, ids[11])
	}

	waitPending(t, e, 0)
	if err := e.Redis.Client().FlushAll(ctx).Err(); err != nil { // Redis lost everything
		t.Fatal(err)
	}
	after := e.mustIngest(t, tenant, 3) // accepted after the loss, before the rebuild
	want := append(slices.Clone(ids[12:]), after...)

	for round := range 2 {
		restored, err := e.Consume.Rebuild(ctx, tenant)
		if err != nil {
			t.Fatal(err)
		}
		if restored[tenant] != int64(len(want)) {
			t.Fatalf("round %d: restored %d, want %d", round, restored[tenant], len(want))
		}
		if got := e.queueIDs(t, tenant); !slices.Equal(got, want) {
			t.Fatalf("round %d: queue\n%v\nwant\n%v", round, got, want)
		}
		if o, _ := e.Queue.Offset(ctx, tenant); o != 12 {
			t.Fatalf("round %d: front offset %d, want 12", round, o)
		}
		if n := e.pending(t); n != 0 {
			t.Fatalf("round %d: %d events still pending", round, n)
		}
		if mark, _ := e.Queue.HoldMark(ctx, tenant); mark != "" {
			t.Fatalf("round %d: hold mark left: new events would wait for the worker", round)
		}
	}
	if n := e.QueueLen(t, off); n != 0 {
		t.Fatalf("tenant with the flag off has %d queued events", n)
	}
	// New events go behind the restored ones, straight into the queue.
	more := e.mustIngest(t, tenant, 2)
	if got := e.queueIDs(t, tenant); !slices.Equal(got, append(want, more...)) {
		t.Fatalf("after the rebuild, new events: %v", got[len(got)-2:])
	}
}

// A rebuild fills the queue up to its limit and holds the rest, which enters in order as the
// consumer trims.
func TestRebuildRespectsTheQueueLimit(t *testing.T) {
	e := startConsume(t)
	ctx := context.Background()
	tenant := testenv.MustTenant(t, e.DB, true).ID
	ids := e.mustIngest(t, tenant, 9)
	if err := e.Redis.Client().FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	e.Queue.MaxLength = 4
	if _, err := e.Consume.Rebuild(ctx, tenant); err != nil {
		t.Fatal(err)
	}
	var consumed []string
	for round := 0; len(consumed) < len(ids) && round < 10; round++ {
		got := e.queueIDs(t, tenant)
		if len(got) > 4 {
			t.Fatalf("queue holds %d, above its limit", len(got))
		}
		consumed = append(consumed, got...)
		if _, err := e.Queue.Trim(ctx, tenant, int64(len(got)), -1); err != nil {
			t.Fatal(err)
		}
		e.mustRequeue(t)
	}
	if !slices.Equal(consumed, ids) {
		t.Fatalf("consumed %v, want %v", consumed, ids)
	}
}

// Fronts recorded out of order, by several processes, only move the stored front forward.
func TestTrimLogKeepsTheFurthestFront(t *testing.T) {
	e := startConsume(t)
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	a, b := NewTrimLog(e.DB, clock.Real{}, log), NewTrimLog(e.DB, clock.Real{}, log)
	defer a.Close()
	defer b.Close()
	a.Record(5, eventqueue.Trimmed{Count: 3, Front: 9, LastID: "0002"})
	if err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	b.Record(5, eventqueue.Trimmed{Count: 3, Front: 6, LastID: "0001"}) // an older trim, written late
	b.Record(6, eventqueue.Trimmed{Count: 1, Front: 1, LastID: "0007"})
	b.Record(6, eventqueue.Trimmed{}) // nothing trimmed: nothing recorded
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	var rows []models.QueueFront
	if err := e.DB.Order("tenant_id").Find(&rows).Error; err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[0].Front != 9 || rows[0].TrimmedThrough != "0002" || rows[1].Front != 1 || rows[1].TrimmedThrough != "0007" {
		t.Fatalf("rows %+v", rows)
	}
}

// A request in flight when the rebuild began clears its event's pending mark after the
// rebuild marked it (its append went into the queue the rebuild emptied): the second mark,
// after RebuildSettle, puts the event back anyway.
func TestRebuildSurvivesAnAckInFlight(t *testing.T) {
	e := startConsume(t)
	ctx := context.Background()
	tenant := testenv.MustTenant(t, e.DB, true).ID
	ids := e.mustIngest(t, tenant, 3)
	waitPending(t, e, 0)
	if err := e.Redis.Client().FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := e.Consume.Rebuild(ctx, tenant); done <- err }()
	waitPending(t, e, 3) // the first mark
	if err := e.DB.Model(&models.TrackedEvent{}).Where("id = ?", ids[1]).UpdateColumn("queue_pending", false).Error; err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := e.queueIDs(t, tenant); !slices.Equal(got, ids) {
		t.Fatalf("queue %v, want %v: the late ack's event is lost", got, ids)
	}
}

// Pruning stored events leaves the queues alone: an old event still queued stays queued. After
// Redis lost the queue, a rebuild restores only the events still stored.
func TestPruneLeavesTheQueueAndRebuildRestoresWhatIsStored(t *testing.T) {
	e := startConsume(t)
	ctx := context.Background()
	tenant := testenv.MustTenant(t, e.DB, true).ID
	e.Clock.Advance(-10 * 24 * time.Hour)
	e.mustIngest(t, tenant, 5)
	e.Clock.Advance(10 * 24 * time.Hour)
	recent := e.mustIngest(t, tenant, 3)
	waitPending(t, e, 0)
	if n := e.QueueLen(t, tenant); n != 8 {
		t.Fatalf("queue length %d, want 8", n)
	}

	p := &retention.Pruner{DB: e.DB, Events: eventstore.New(e.DB), Keep: 3 * 24 * time.Hour, Clock: e.Clock}
	res, err := p.Prune(ctx, e.Clock.Now(), false)
	if err != nil || res.Deleted != 5 {
		t.Fatalf("prune = %+v, %v; want the 5 old events deleted", res, err)
	}
	if n := e.QueueLen(t, tenant); n != 8 {
		t.Errorf("queue length %d after the prune, want 8: pruning must not touch the queue", n)
	}

	if err := e.Redis.Client().FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	restored, err := e.Consume.Rebuild(ctx, tenant)
	if err != nil || restored[tenant] != 3 {
		t.Fatalf("rebuild = %v, %v; want the 3 stored events restored", restored, err)
	}
	if got := e.queueIDs(t, tenant); !slices.Equal(got, recent) {
		t.Errorf("queue after the rebuild %v, want the stored events %v", got, recent)
	}
}
