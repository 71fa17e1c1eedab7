package delivery

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/eventq/eventq/internal/eventqueue"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/models"
)

// storeQueued commits n queued events of tenant as a request's commit does, with their
// pending batch, and returns the request (its rows and the batch's id).
func (e *ingestEnv) storeQueued(t *testing.T, tenant uint64, n int) *commitRequest {
	t.Helper()
	rows := make([]models.TrackedEvent, n)
	for i := range rows {
		rows[i] = newRow(uuid.Must(uuid.NewV7()).String(), tenant, input("s", int64(i)), Client{}, e.Clock.Now().UTC())
		rows[i].Queued = true
	}
	r := &commitRequest{tenant: tenant, rows: rows, queued: true}
	testenv.Must(t, e.Ingest.store(context.Background(), []*commitRequest{r}, n))
	if r.pending == "" {
		t.Fatal("a queued store made no pending batch")
	}
	return r
}

// appendPending appends r's events as its pusher does, deduplicated by its pending batch, and
// returns the settlement it leaves (nil when the append skipped the batch: it was claimed).
func (e *ingestEnv) appendPending(t *testing.T, r *commitRequest) *appendedBatch {
	t.Helper()
	b := batchOf(r.tenant, r.rows)
	b.Pending = []eventqueue.Span{{ID: r.pending, N: len(r.rows)}}
	res := e.Queue.AppendOnce(context.Background(), e.Clock.Now(), []eventqueue.Batch{b})[0]
	testenv.Must(t, res.Err)
	var s settlement
	s.add(r.tenant, []*commitRequest{r}, res)
	if len(s.batches) == 0 {
		return nil
	}
	return &s.batches[0]
}

// A request's events are pending until their batch is settled, which takes no UPDATE of the
// rows: none of them is ever marked.
func TestAnIngestedEventIsPendingThroughItsBatchAlone(t *testing.T) {
	e := startIngest(t)
	tenant := testenv.MustTenant(t, e.DB, true).ID
	r := e.storeQueued(t, tenant, 5)
	if p := e.pending(t); p != 5 {
		t.Fatalf("%d events pending after the commit, want 5", p)
	}
	e.Ingest.settleBatches([]appendedBatch{*e.appendPending(t, r)})
	if p := e.pending(t); p != 0 {
		t.Fatalf("%d events pending after the settle, want 0", p)
	}
	var marked int64
	testenv.Must(t, e.DB.Model(&models.TrackedEvent{}).Where("queue_pending = ?", true).Count(&marked).Error)
	if marked != 0 {
		t.Fatalf("%d rows were marked", marked)
	}
}

// A batch whose events went in but whose pusher died before deleting it is claimed by the
// re-pusher once old enough: every event ends in the queue once, and nothing stays pending. A
// batch that never reached the queue (Redis failed) is pushed the same way.
func TestTheRePusherFinishesABatchWhosePusherDied(t *testing.T) {
	e := startIngest(t)
	tenant := testenv.MustTenant(t, e.DB, true).ID
	in := e.storeQueued(t, tenant, 3) // appended, never settled
	e.appendPending(t, in)
	out := e.storeQueued(t, tenant, 2) // never appended

	if n := e.mustRequeue(t); n != 0 || e.pending(t) != 5 {
		t.Fatalf("before the minimum age: pushed %d, %d pending; want 0 and 5", n, e.pending(t))
	}
	e.Clock.Advance(RequeueMinAge + time.Second)
	if n := e.mustRequeue(t); n != 2 {
		t.Fatalf("requeue pushed %d events, want 2", n)
	}
	var want []string
	for _, r := range append(in.rows, out.rows...) {
		want = append(want, r.ID)
	}
	if got := e.queueIDs(t, tenant); !slices.Equal(got, want) {
		t.Fatalf("queue %q\nwant %q", got, want)
	}
	if p := e.pending(t); p != 0 {
		t.Fatalf("%d events still pending", p)
	}
}

// Once a batch is claimed (a held tenant's drain marks its events and pushes them), its pusher
// settling late does not mark its held events again, which would push them a second time; and
// a pusher appending late appends nothing of it.
func TestALateSettleLeavesAClaimedBatchAlone(t *testing.T) {
	e := startIngest(t)
	e.Queue.MaxLength = 2
	tenant := testenv.MustTenant(t, e.DB, true).ID
	r := e.storeQueued(t, tenant, 4)
	settled := e.appendPending(t, r) // two went in, two were held
	if settled == nil || settled.appended != 2 || len(settled.held) != 2 {
		t.Fatalf("append left %+v, want two appended and two held", settled)
	}
	e.Queue.MaxLength = 0
	if _, err := e.Ingest.Delivery().DrainHeld(context.Background(), tenant); err != nil {
		t.Fatal(err)
	}
	if p := e.pending(t); p != 0 {
		t.Fatalf("%d events pending after the drain, want 0", p)
	}
	e.Ingest.settleBatches([]appendedBatch{*settled}) // the pusher, late
	if p := e.pending(t); p != 0 {
		t.Fatalf("the late settle left %d events pending, want 0", p)
	}
	var want []string
	for _, row := range r.rows {
		want = append(want, row.ID)
	}
	if got := e.queueIDs(t, tenant); !slices.Equal(got, want) {
		t.Fatalf("queue %q\nwant %q", got, want)
	}

	t.Run("an append after the claim skips the batch", func(t *testing.T) {
		late := e.storeQueued(t, tenant, 3)
		if _, err := e.Ingest.Delivery().DrainHeld(context.Background(), tenant); err != nil { // claims it, pushes it
			t.Fatal(err)
		}
		if s := e.appendPending(t, late); s != nil {
			t.Fatalf("a claimed batch was appended: %+v", s)
		}
		if n := e.QueueLen(t, tenant); n != 7 {
			t.Fatalf("queue length %d, want 7", n)
		}
	})
}

// The pusher marks the events of its batch that did not fit in the queue, and deletes the
// batch: the drain pushes exactly those, in order, as the consumer trims.
func TestHeldEventsOfABatchAreMarked(t *testing.T) {
	e := startIngest(t)
	e.Queue.MaxLength = 3
	tenant := testenv.MustTenant(t, e.DB, true).ID
	ids := e.mustIngest(t, tenant, 5)
	waitPending(t, e, 2)
	var marked []string
	testenv.Must(t, e.DB.Model(&models.TrackedEvent{}).Where("queue_pending = ?", true).Order("id").Pluck("id", &marked).Error)
	if !slices.Equal(marked, ids[3:]) {
		t.Fatalf("marked %q, want the two held %q", marked, ids[3:])
	}
	var batches int64
	testenv.Must(t, e.DB.Model(&models.PendingBatch{}).Count(&batches).Error)
	if batches != 0 {
		t.Fatalf("%d pending batches left", batches)
	}
	if _, err := e.Queue.Trim(context.Background(), tenant, 3, -1); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Ingest.Delivery().DrainHeld(context.Background(), tenant); err != nil {
		t.Fatal(err)
	}
	if got := e.queueIDs(t, tenant); !slices.Equal(got, ids[3:]) {
		t.Fatalf("queue %q after the drain, want %q", got, ids[3:])
	}
}

// A refused commit leaves no pending batch behind, and the connection it used works on.
func TestARefusedCommitLeavesNoPendingBatch(t *testing.T) {
	e := startIngest(t)
	testenv.RefuseSession(t, e.DB, "poison")
	tenant := testenv.MustTenant(t, e.DB, true).ID
	rows := []models.TrackedEvent{newRow(uuid.Must(uuid.NewV7()).String(), tenant, input("poison", 1), Client{}, time.Now().UTC())}
	rows[0].Queued = true
	for range 10 { // more than the pool's connections: each must be back out of its transaction
		err := e.Ingest.store(context.Background(), []*commitRequest{{tenant: tenant, rows: rows, queued: true}}, 1)
		if err == nil {
			t.Fatal("a refused row was stored")
		}
	}
	var batches int64
	testenv.Must(t, e.DB.Model(&models.PendingBatch{}).Count(&batches).Error)
	if batches != 0 {
		t.Fatalf("%d pending batches left by refused commits", batches)
	}
	r := e.storeQueued(t, tenant, 3)
	if p := e.pending(t); p != 3 {
		t.Fatalf("%d pending after a good commit, want 3 (batch %s)", p, r.pending)
	}
}
