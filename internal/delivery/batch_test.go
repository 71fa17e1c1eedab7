package delivery

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eventq/eventq/internal/eventqueue"
	"github.com/eventq/eventq/internal/eventqueue/queuetest"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/models"
)

// A batch holding one request the database refuses fails that request alone: the others are
// committed and queued.
func TestABatchFailsOnlyTheRequestTheDatabaseRefuses(t *testing.T) {
	e := startIngest(t)
	testenv.RefuseSession(t, e.DB, "poison")
	tenants := []uint64{testenv.MustTenant(t, e.DB, true).ID, testenv.MustTenant(t, e.DB, true).ID, testenv.MustTenant(t, e.DB, true).ID}

	t.Run("in one batch", func(t *testing.T) {
		now := e.Clock.Now().UTC()
		var batch []*commitRequest
		for i, session := range []string{"good-1", "poison", "good-2"} {
			row := newRow(fmt.Sprintf("0000000%d-0000-7000-8000-000000000000", i), tenants[i], input(session, 1), Client{}, now)
			row.QueuePending = true
			batch = append(batch, &commitRequest{tenant: tenants[i], rows: []models.TrackedEvent{row}, queued: true})
		}
		stored := e.Ingest.commitBatch(batch, 3)
		if len(stored) != 2 || stored[0] != batch[0] || stored[1] != batch[2] {
			t.Fatalf("stored %d requests: want the first and the third", len(stored))
		}
		e.Ingest.push(context.Background(), stored) // the pusher's stage
		if batch[0].err != nil || batch[2].err != nil || batch[1].err == nil {
			t.Fatalf("errors %v, %v, %v: want only the second", batch[0].err, batch[1].err, batch[2].err)
		}
		for i, want := range []int64{1, 0, 1} {
			if rows, n := e.Rows(t, tenants[i]), e.QueueLen(t, tenants[i]); rows != want || n != want {
				t.Fatalf("tenant %d: %d rows, %d queued, want %d", i, rows, n, want)
			}
		}
	})
	t.Run("among 40 concurrent requests", func(t *testing.T) {
		victim, attacker := testenv.MustTenant(t, e.DB, true).ID, testenv.MustTenant(t, e.DB, true).ID
		var wg sync.WaitGroup
		errs := make(chan error, 41)
		for i := 0; i < 40; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				_, err := e.Ingest.Ingest(context.Background(), victim, []Input{input("v", int64(i))}, Client{})
				errs <- err
			}(i)
		}
		_, poisonErr := e.Ingest.Ingest(context.Background(), attacker, []Input{input("poison", 1)}, Client{})
		wg.Wait()
		close(errs)
		failed := 0
		for err := range errs {
			if err != nil {
				failed++
			}
		}
		if failed != 0 || poisonErr == nil {
			t.Fatalf("%d of 40 valid requests failed; poisoned request error %v", failed, poisonErr)
		}
		if rows, n := e.Rows(t, victim), e.QueueLen(t, victim); rows != 40 || n != 40 {
			t.Fatalf("victim: %d rows, %d queued, want 40", rows, n)
		}
	})
}

func (e *ingestEnv) appendOnce(t *testing.T, tenant uint64, rows ...models.TrackedEvent) {
	t.Helper()
	b := eventqueue.Batch{TenantID: tenant}
	for _, r := range rows {
		b.Events = append(b.Events, eventqueue.Event{ID: r.ID, JSON: r.MarshalQueue()})
	}
	if err := e.Queue.AppendOnce(context.Background(), e.Clock.Now(), []eventqueue.Batch{b})[0].Err; err != nil {
		t.Fatal(err)
	}
}

// An event that reached its queue but whose pending mark was never cleared (the api died in
// between, or Redis's reply was lost) is not appended again by the re-pusher.
func TestRequeueDoesNotAppendAnEventAlreadyInItsQueue(t *testing.T) {
	e := startIngest(t)
	tenant := testenv.MustTenant(t, e.DB, true).ID
	appended := e.pendingRow(t, tenant, "appended-then-crashed")
	e.appendOnce(t, tenant, appended)
	missing := e.pendingRow(t, tenant, "never-appended")

	e.Clock.Advance(RequeueMinAge + time.Second)
	if n := e.mustRequeue(t); n != 1 {
		t.Fatalf("requeue pushed %d events, want 1", n)
	}
	got, err := queuetest.Read(context.Background(), e.Queue, tenant)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{string(appended.MarshalQueue()), string(missing.MarshalQueue())}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("queue %q\nwant %q", got, want)
	}
	if p := e.pending(t); p != 0 {
		t.Fatalf("%d events still pending", p)
	}
	t.Run("and a second re-pusher that read them as pending appends nothing either", func(t *testing.T) {
		e.appendOnce(t, tenant, appended, missing)
		if n := e.QueueLen(t, tenant); n != 2 {
			t.Fatalf("queue length %d, want 2", n)
		}
	})
}

// Ingested events leave no deduplication entry of their own: their pending batch's record is
// deleted once the batch is settled. The entries of marked events expire DedupGrace after their
// mark is cleared; those of unsettled ones after Retention.
func TestDeduplicationMemoryIsBounded(t *testing.T) {
	e := startIngest(t)
	tenant := testenv.MustTenant(t, e.DB, true).ID
	rdb := e.Redis.Client()
	size := func() int64 {
		n, err := rdb.ZCard(context.Background(), eventqueue.AppendedKey(tenant)).Result()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	records := func() int {
		keys, err := rdb.Keys(context.Background(), eventqueue.PendingKey(tenant, "*")).Result()
		if err != nil {
			t.Fatal(err)
		}
		return len(keys)
	}
	if _, err := e.Ingest.Ingest(context.Background(), tenant, []Input{input("s", 1), input("s", 2)}, Client{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, "the two ingested events are settled", func() bool {
		return e.pending(t) == 0 && records() == 0
	})
	if n := size(); n != 0 {
		t.Fatalf("%d entries for ingested events, want 0", n)
	}
	crashed := e.pendingRow(t, tenant, "crashed")
	e.appendOnce(t, tenant, crashed) // appended, mark never cleared, never acknowledged
	settled := e.pendingRow(t, tenant, "settled")
	e.appendOnce(t, tenant, settled)
	testenv.Must(t, e.Queue.ShortenDedup(context.Background(), e.Clock.Now(), tenant, []string{settled.ID}))
	if n := size(); n != 2 {
		t.Fatalf("%d entries, want 2", n)
	}

	t.Run("a pending batch's record lapses after Retention unless it is settled", func(t *testing.T) {
		r := e.storeQueued(t, tenant, 2)
		e.appendPending(t, r) // its pusher dies here
		ttl, err := rdb.PTTL(context.Background(), eventqueue.PendingKey(tenant, r.pending)).Result()
		if err != nil || ttl <= 0 || ttl > eventqueue.Retention {
			t.Fatalf("record TTL %s (%v), want at most %s", ttl, err, eventqueue.Retention)
		}
		testenv.Must(t, e.DB.Where("id = ?", r.pending).Delete(&models.PendingBatch{}).Error)
	})

	e.Clock.Advance(eventqueue.DedupGrace + time.Second)
	e.appendOnce(t, tenant, e.pendingRow(t, tenant, "later"))
	if n := size(); n != 2 {
		t.Fatalf("%d entries after DedupGrace, want 2 (the unsettled and the new one)", n)
	}
	e.Clock.Advance(eventqueue.Retention)
	e.appendOnce(t, tenant, e.pendingRow(t, tenant, "much-later"))
	if n := size(); n != 1 {
		t.Fatalf("%d entries after Retention, want 1", n)
	}
	ttl, err := rdb.PTTL(context.Background(), eventqueue.AppendedKey(tenant)).Result()
	if err != nil || ttl <= 0 || ttl > eventqueue.Retention {
		t.Fatalf("set TTL %s (%v): an idle tenant's set must expire", ttl, err)
	}
}

// With Redis down, ingestion commits and answers without waiting for Redis: the events stay
// pending, and the re-pusher appends them in order, once each, when Redis is back.
func TestIngestionDoesNotWaitForADownRedis(t *testing.T) {
	e := startIngest(t)
	tenant := testenv.MustTenant(t, e.DB, true).ID
	if _, err := e.Ingest.Ingest(context.Background(), tenant, []Input{input("warm", 0)}, Client{}); err != nil {
		t.Fatal(err)
	}
	e.Redis.Pause() // a hung Redis: connections accepted, nothing answered
	var ids []string
	var slowest time.Duration
	for i := 1; i <= 20; i++ {
		start := time.Now()
		got, err := e.Ingest.Ingest(context.Background(), tenant, []Input{input("s", int64(i))}, Client{})
		if err != nil {
			t.Fatalf("ingest %d with Redis down: %v", i, err)
		}
		slowest = max(slowest, time.Since(start))
		ids = append(ids, got...)
	}
	t.Logf("20 ingestions with Redis hung: slowest %s", slowest)
	if slowest > time.Second {
		t.Fatalf("slowest ingestion took %s with Redis hung; the contract allows 1 s", slowest)
	}
	if p := e.pending(t); p != 20 {
		t.Fatalf("%d pending, want 20", p)
	}
	e.Redis.Resume()
	e.Clock.Advance(RequeueMinAge + time.Second)
	for e.mustRequeue(t) > 0 { // a second pass pushes nothing
	}
	got, err := queuetest.Read(context.Background(), e.Queue, tenant)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 21 {
		t.Fatalf("queue holds %d events, want 21", len(got))
	}
	for i, id := range ids {
		if !strings.Contains(got[i+1], id) {
			t.Fatalf("event %d is %s, want %s: pending events are appended in order", i+1, got[i+1], id)
		}
	}
}

// A committer writes the next batch while its pusher is still appending the previous one to
// Redis: with the first request's append held (a gate, not a timeout, so that a busy machine's
// slow commit of the second cannot outlast it), the second request's rows are committed
// before the first request is answered. (On SQLite, whose one committer would
// otherwise wait for the append, this fails without the pusher stage.)
func TestCommitterWritesWhileThePreviousBatchIsPushed(t *testing.T) {
	var hang uint64 // the tenant whose append the gate holds, once set
	g := newGate(appendOf(&hang))
	e := startGatedIngest(t, g)
	e.Ingest.limits.Events = 0 // no spool: the request waits for its push however long
	first, second := testenv.MustTenant(t, e.DB, true).ID, testenv.MustTenant(t, e.DB, true).ID
	for _, tenant := range []uint64{first, second} { // warm the flag cache and the connections
		if _, err := e.Ingest.Ingest(context.Background(), tenant, []Input{input("warm", 0)}, Client{}); err != nil {
			t.Fatal(err)
		}
	}
	hang = first // held until the test lets it go, whatever the machine's speed
	answered := make(chan error, 1)
	go func() {
		_, err := e.Ingest.Ingest(context.Background(), first, []Input{input("a", 1)}, Client{})
		answered <- err
	}()
	<-g.reached // the first request's rows are committed; its append hangs
	go e.Ingest.Ingest(context.Background(), second, []Input{input("b", 1)}, Client{})
	testenv.Eventually(t, 30*time.Second, "the second request's rows committed while the first one's append hangs",
		func() bool { return e.Rows(t, second) >= 2 })
	select {
	case err := <-answered:
		t.Fatalf("the first request was answered (err %v) while its append hangs", err)
	default:
	}
	close(g.release)
	if err := <-answered; err != nil {
		t.Fatalf("first request: %v (its events are committed; the append's failure leaves them pending)", err)
	}
}
