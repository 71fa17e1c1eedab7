package delivery

import (
	"context"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/eventq/eventq/internal/eventqueue"
	"github.com/eventq/eventq/internal/metrics"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/models"
)

// A full queue holds back what does not fit; the held events enter in acceptance order as the
// consumer trims, none overtaken by a newer one, and each arrives once.
func TestAFullQueueHoldsBackAndLosesNothing(t *testing.T) {
	e := startIngest(t)
	e.Queue.MaxLength = 5
	tenant := testenv.MustTenant(t, e.DB, true).ID
	var accepted []string
	for _, n := range []int{3, 3, 2, 4} { // the second request fits in part
		accepted = append(accepted, e.mustIngest(t, tenant, n)...)
	}
	if got := e.queueIDs(t, tenant); len(got) != 5 {
		t.Fatalf("queue holds %d events, want the cap of 5", len(got))
	}
	waitPending(t, e, 7)
	if mark, _ := e.Queue.HoldMark(context.Background(), tenant); mark == "" {
		t.Fatal("no hold mark while events are held back")
	}

	var consumed []string
	for round := 0; len(consumed) < len(accepted) && round < 10; round++ {
		got := e.queueIDs(t, tenant)
		if len(got) > 5 {
			t.Fatalf("queue holds %d events, above the cap", len(got))
		}
		consumed = append(consumed, got...)
		if _, err := e.Queue.Trim(context.Background(), tenant, int64(len(got)), -1); err != nil {
			t.Fatal(err)
		}
		if round == 0 { // a newer event arrives while older ones are held: it queues behind them
			accepted = append(accepted, e.mustIngest(t, tenant, 1)...)
		}
		e.mustRequeue(t)
	}
	if len(consumed) != len(accepted) {
		t.Fatalf("consumed %d events, want %d", len(consumed), len(accepted))
	}
	for i := range accepted {
		if consumed[i] != accepted[i] {
			t.Fatalf("event %d is %s, want %s: not in acceptance order", i, consumed[i], accepted[i])
		}
	}
	if p := e.pending(t); p != 0 {
		t.Fatalf("%d events still pending", p)
	}
	if held, _ := e.Queue.HeldTenants(context.Background()); len(held) != 0 {
		t.Fatalf("tenants still recorded as held: %v", held)
	}
	t.Run("once drained, new events are appended at once", func(t *testing.T) {
		e.mustIngest(t, tenant, 2)
		if n := e.QueueLen(t, tenant); n != 2 {
			t.Fatalf("queue length %d, want 2", n)
		}
	})
}

// Two api processes appending to one tenant at once never take its queue past the cap.
func TestTwoProcessesCannotOvershootTheCap(t *testing.T) {
	e := startIngest(t)
	e.Queue.MaxLength = 50
	second := eventqueue.New(e.Redis.Client())
	second.MaxLength = 50
	other := e.newIngester(t, Options{Queue: second})
	tenant := testenv.MustTenant(t, e.DB, true).ID
	var wg sync.WaitGroup
	for i := 0; i < 40; i++ {
		wg.Add(1)
		go func(in ingester) {
			defer wg.Done()
			if _, err := in.Ingest(context.Background(), tenant, []Input{input("a", 1), input("b", 2), input("c", 3)}, Client{}); err != nil {
				t.Error(err)
			}
		}([]ingester{e.Ingest, other}[i%2])
	}
	wg.Wait()
	if n := e.QueueLen(t, tenant); n != 50 {
		t.Fatalf("queue length %d, want exactly the cap of 50", n)
	}
	waitPending(t, e, 70)
}

// The worker reports the queue length of each tenant whose queue is full, and only of those.
func TestFullQueuesAreReportedAndOnlyThey(t *testing.T) {
	e := startIngest(t)
	e.Queue.MaxLength = 3
	m := metrics.New()
	e.Ingest = e.newIngester(t, Options{Metrics: m})
	full, fine := testenv.MustTenant(t, e.DB, true).ID, testenv.MustTenant(t, e.DB, true).ID
	e.mustIngest(t, full, 5)
	e.mustIngest(t, fine, 2)
	e.mustRequeue(t)
	if n := testutil.CollectAndCount(m.FullQueues); n != 1 {
		t.Fatalf("%d series, want 1 (the full tenant's)", n)
	}
	if v := testutil.ToFloat64(m.FullQueues.WithLabelValues(models.FormatID(full))); v != 3 {
		t.Fatalf("reported length %v, want 3", v)
	}
	if _, err := e.Queue.Trim(context.Background(), full, 3, -1); err != nil {
		t.Fatal(err)
	}
	e.mustRequeue(t)
	if n := testutil.CollectAndCount(m.FullQueues); n != 0 {
		t.Fatalf("%d series once the held events are in, want 0", n)
	}
}
