package consume

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/internal/tracking"
)

func mustStats(t *testing.T, s *Service, tenant uint64) Stats {
	t.Helper()
	st, err := s.Stats(context.Background(), tenant)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// held_back counts the stored events that are not in the queue, and only those: an event
// appended whose pending mark is not cleared yet is not held back, on a busy tenant as on a
// full queue; held events count until they move in.
func TestStatsHeldBackIsExact(t *testing.T) {
	t.Run("counts only what is not in the queue, right after the appends", func(t *testing.T) {
		e := startConsume(t)
		e.Queue.MaxLength = 30
		fits, full := testenv.MustTenant(t, e.DB, true).ID, testenv.MustTenant(t, e.DB, true).ID
		e.mustIngest(t, fits, 20)
		e.mustIngest(t, full, 50)
		if st := mustStats(t, e.Consume, fits); st.HeldBack != 0 || st.Length != 20 {
			t.Fatalf("a tenant whose events all went in: %+v", st)
		}
		if st := mustStats(t, e.Consume, full); st.HeldBack != 20 || st.Length != 30 {
			t.Fatalf("a full queue: %+v", st)
		}
		if _, _, err := e.Consume.Trim(context.Background(), full, 10, -1); err != nil {
			t.Fatal(err)
		}
		e.mustRequeue(t)
		if st := mustStats(t, e.Consume, full); st.HeldBack != 10 || st.Length != 30 || st.Offset != 10 {
			t.Fatalf("after a trim and the re-push: %+v", st)
		}
	})
	t.Run("a busy healthy tenant shows no more than the events being appended", func(t *testing.T) {
		e := startConsume(t)
		tenant := testenv.MustTenant(t, e.DB, true).ID
		const writers, batches, batch = 4, 40, 5
		var wg sync.WaitGroup
		var stop atomic.Bool
		for range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				in := make([]tracking.Input, batch)
				for i := range in {
					in[i] = tracking.Input{Type: "page_view", SessionID: "s", URL: "https://shop.example/a", EventSequence: int64(i)}
				}
				for range batches {
					if _, err := e.Ingest.Ingest(context.Background(), tenant, in, tracking.Client{}); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		done := make(chan struct{})
		go func() { wg.Wait(); stop.Store(true); close(done) }()
		checks := 0
		for !stop.Load() {
			st := mustStats(t, e.Consume, tenant)
			// Stored and not appended yet: at most the rows of the requests in flight.
			if st.HeldBack > writers*batch {
				t.Fatalf("held_back %d while every event goes into the queue (%+v)", st.HeldBack, st)
			}
			checks++
		}
		<-done
		if st := mustStats(t, e.Consume, tenant); st.HeldBack != 0 || st.Length != writers*batches*batch {
			t.Fatalf("after the traffic: %+v", st)
		}
		t.Logf("%d stats calls during the traffic", checks)
	})
}
