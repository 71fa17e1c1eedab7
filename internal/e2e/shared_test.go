package e2e

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/eventq/eventq/client"
	"github.com/eventq/eventq/internal/testenv"
)

// Two consumers, each talking to its own api process, share one tenant's queue through leases
// on a three-master Redis Cluster: every event is handled exactly once between them, and the
// acknowledged queue ends empty with its offset past every event.
func TestSharedConsumptionOnRedisClusterAcrossTwoAPIs(t *testing.T) {
	s := startStack(t, onCluster(), processes(2, 1))
	sh := s.MustShop(t, "acct_shared", true)
	token := s.MustToken(t, sh)
	var want []string
	for i := 0; i < 6; i++ {
		want = append(want, s.Track(t, s.Bases[i%2], sh, 25)...)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	seen := map[string]int{}
	byAPI := map[int]int{}
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	// Each consumer's first event waits (10 s at most) until the other has one too, so that
	// both take part however late one of them starts: 150 events of 1 ms of work are gone in
	// a fraction of a second, less than one api's first lease can take under load.
	arrived := []chan struct{}{make(chan struct{}), make(chan struct{})}
	var arrive [2]sync.Once
	for i, base := range s.Bases {
		c := client.New(base, token)
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- c.ConsumeShared(ctx, func(_ context.Context, e client.LeasedEvent) error {
				arrive[i].Do(func() {
					close(arrived[i])
					select {
					case <-arrived[1-i]:
					case <-time.After(10 * time.Second):
					}
				})
				time.Sleep(time.Millisecond) // the work
				mu.Lock()
				defer mu.Unlock()
				seen[e.Event.ID]++
				byAPI[i]++
				return nil
			}, client.WithLeaseLimit(10))
		}()
	}
	testenv.Eventually(t, 30*time.Second, "every event is handled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) == len(want)
	})
	testenv.Eventually(t, 10*time.Second, "the acknowledged queue is empty", func() bool {
		n, err := s.Queue.Len(context.Background(), sh.Tenant.ID)
		return err == nil && n == 0
	})
	cancel()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("ConsumeShared: %v", err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, id := range want {
		if seen[id] != 1 {
			t.Errorf("event %s handled %d times, want once", id, seen[id])
		}
	}
	if byAPI[0] == 0 || byAPI[1] == 0 {
		t.Errorf("events handled through each api: %v; want both to take part", byAPI)
	}
	if left := s.Read(t, s.Base, token); len(left) != 0 {
		t.Errorf("queue after the consumers %v, want empty", left)
	}
}
