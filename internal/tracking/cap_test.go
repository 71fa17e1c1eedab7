package tracking

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/eventq/eventq/internal/eventqueue/queuetest"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/eventq/eventq/internal/eventqueue"
	"github.com/eventq/eventq/internal/metrics"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/models"
)

// queueIDs reads the ids in tenant's queue, front first.
func (e *ingestEnv) queueIDs(t *testing.T, tenant uint64) []string {
	t.Helper()
	raw, err := queuetest.Read(context.Background(), e.Queue, tenant)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, len(raw))
	for i, r := range raw {
		var ev models.QueueEvent
		if err := json.Unmarshal([]byte(r), &ev); err != nil {
			t.Fatal(err)
		}
		ids[i] = ev.ID
	}
	return ids
}

func (e *ingestEnv) mustIngest(t *testing.T, tenant uint64, n int) []string {
	t.Helper()
	in := make([]Input, n)
	for i := range in {
		in[i] = input("s", int64(i))
	}
	ids, err := e.Ingest.Ingest(context.Background(), tenant, in, Client{})
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

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
	other := NewIngestor(e.DB, e.Flags, second, e.Clock, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	t.Cleanup(other.Close)
	tenant := testenv.MustTenant(t, e.DB, true).ID
	var wg sync.WaitGroup
	for i := 0; i < 40; i++ {
		wg.Add(1)
		go func(in *Ingestor) {
			defer wg.Done()
			if _, err := in.Ingest(context.Background(), tenant, []Input{input("a", 1), input("b", 2), input("c", 3)}, Client{}); err != nil {
				t.Error(err)
			}
		}([]*Ingestor{e.Ingest, other}[i%2])
	}
	wg.Wait()
	if n := e.QueueLen(t, tenant); n != 50 {
		t.Fatalf("queue length %d, want exactly the cap of 50", n)
	}
	waitPending(t, e, 70)
}

// waitPending waits until n events are pending (the marks of the appended ones
// are cleared in the background).
func waitPending(t *testing.T, e *ingestEnv, n int64) {
	t.Helper()
	testenv.Eventually(t, 5*time.Second, fmt.Sprintf("%d events are pending", n), func() bool { return e.pending(t) == n })
}

// The worker reports the queue length of each tenant whose queue is full, and only of those.
func TestFullQueuesAreReportedAndOnlyThey(t *testing.T) {
	e := startIngest(t)
	e.Queue.MaxLength = 3
	m := metrics.New()
	e.Ingest = NewIngestor(e.DB, e.Flags, e.Queue, e.Clock, slog.New(slog.NewTextHandler(io.Discard, nil)), m)
	t.Cleanup(e.Ingest.Close)
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
