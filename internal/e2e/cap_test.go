package e2e

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/eventq/eventq/internal/eventqueue"
	"github.com/eventq/eventq/internal/eventstore"
	"github.com/eventq/eventq/internal/testenv"
)

// Four producers track 2,000 events through two api processes into a queue capped at 1,000
// whose consumer is stopped: the queue stops at exactly 1,000 and the rest is held back. Once
// the consumer runs, every event arrives once, each producer's in the order it was accepted.
func TestACappedQueueHoldsBackAcrossAPIsAndDrainsInOrder(t *testing.T) {
	const capacity, producers, requests, perRequest = 1000, 4, 5, 100
	s := startStack(t, processes(2, 1), withEnv("EVENTQUEUE_MAX_LENGTH=1000"))
	sh := s.MustShop(t, "", true)
	token := s.MustToken(t, sh)

	accepted := make([][]string, producers)
	var wg sync.WaitGroup
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			for r := 0; r < requests; r++ {
				accepted[p] = append(accepted[p], s.Track(t, s.Bases[(p+r)%2], sh, perRequest)...)
			}
		}(p)
	}
	wg.Wait()
	total := producers * requests * perRequest

	rdb := s.Redis.Client()
	ctx := context.Background()
	// Exactly the cap: at once, or, on a busy machine where an append missed its deadline, once
	// the worker has pushed what was held behind it; never more.
	var length int64
	testenv.Eventually(t, 60*time.Second, "the queue fills to its cap", func() bool {
		var err error
		length, err = rdb.LLen(ctx, eventqueue.Key(sh.Tenant.ID)).Result()
		testenv.Must(t, err)
		if length > capacity {
			t.Fatalf("queue length %d with %d events tracked, over the cap of %d", length, total, capacity)
		}
		return length == capacity
	})
	testenv.Eventually(t, 10*time.Second, "the events beyond the cap are held back", func() bool {
		n, err := eventstore.New(s.DB).Count(ctx, sh.Tenant.ID)
		return err == nil && n == int64(total-capacity)
	})
	listBytes, _ := rdb.MemoryUsage(ctx, eventqueue.Key(sh.Tenant.ID), 0).Result()
	setBytes, _ := rdb.MemoryUsage(ctx, eventqueue.AppendedKey(sh.Tenant.ID), 0).Result()
	t.Logf("%d events tracked into a queue capped at %d: %d queued (%d bytes), %d held back; dedup set %d bytes",
		total, capacity, length, listBytes, total-capacity, setBytes)

	var consumed []string
	deadline := time.Now().Add(90 * time.Second)
	for len(consumed) < total {
		if time.Now().After(deadline) {
			t.Fatalf("consumed %d of %d events", len(consumed), total)
		}
		got := s.Read(t, s.Base, token)
		if len(got) > capacity {
			t.Fatalf("read %d events from a queue capped at %d", len(got), capacity)
		}
		if len(got) == 0 {
			time.Sleep(50 * time.Millisecond) // held events enter at the worker's next pass
			continue
		}
		consumed = append(consumed, got...)
		s.Trim(t, s.Base, token, len(got))
	}
	position := map[string]int{}
	for i, id := range consumed {
		if _, dup := position[id]; dup {
			t.Fatalf("event %s consumed twice", id)
		}
		position[id] = i
	}
	for p, ids := range accepted {
		for i := 1; i < len(ids); i++ {
			if position[ids[i]] < position[ids[i-1]] {
				t.Fatalf("producer %d: event %d was consumed before event %d", p, i, i-1)
			}
		}
	}
	if left := s.Read(t, s.Base, token); len(left) != 0 {
		t.Fatalf("%d events left", len(left))
	}
}
