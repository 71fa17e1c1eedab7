package eventqueue

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eventq/eventq/internal/testenv"
)

func mustLease(t *testing.T, s *Store, tenant uint64, limit int, vis time.Duration, maxd int64) LeaseResult {
	t.Helper()
	res, err := s.Lease(context.Background(), tenant, LeaseArgs{Limit: limit, Visibility: vis, MaxDeliveries: maxd})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func offsetsOf(res LeaseResult) []int64 {
	var out []int64
	for _, e := range res.Events {
		out = append(out, e.Offset)
	}
	return out
}

func mustSettle(t *testing.T, s *Store, tenant uint64, kind AckKind, ids ...string) ([]string, Trimmed) {
	t.Helper()
	items := make([]AckItem, len(ids))
	for i, id := range ids {
		items[i] = AckItem{Kind: kind, LeaseID: id}
	}
	settled, tr, err := s.Settle(context.Background(), tenant, items, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	st := make([]string, len(settled))
	for i, x := range settled {
		st[i] = x.Status
	}
	return st, tr
}

func wantStatuses(t *testing.T, got []string, want ...string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("statuses %v, want %v", got, want)
	}
}

func leaseStores(t *testing.T) map[string]*Store {
	single := New(testenv.StartRedis(t).Client())
	cluster := New(testenv.StartRedisCluster(t).Client())
	t.Cleanup(func() { single.Close(); cluster.Close() })
	return map[string]*Store{"single": single, "cluster": cluster}
}

// Every lease-script behaviour on a single Redis and on a Redis Cluster.
func TestLeases(t *testing.T) {
	for name, s := range leaseStores(t) {
		t.Run(name, func(t *testing.T) { testLeases(t, s) })
	}
}

func testLeases(t *testing.T, s *Store) {
	ctx := context.Background()
	t.Run("hands out disjoint events lowest offset first and trims the acknowledged front", func(t *testing.T) {
		appendN(t, s, 1, 1, 6)
		a := mustLease(t, s, 1, 2, time.Minute, 10)
		b := mustLease(t, s, 1, 10, time.Minute, 10)
		if !slices.Equal(offsetsOf(a), []int64{0, 1}) || !slices.Equal(offsetsOf(b), []int64{2, 3, 4}) {
			t.Fatalf("leased %v and %v", offsetsOf(a), offsetsOf(b))
		}
		if a.Events[0].Deliveries != 1 || !strings.Contains(a.Events[0].Event, `"n":1`) || len(a.Events[0].LeaseID) > 128 {
			t.Fatalf("first leased event %+v", a.Events[0])
		}
		if c := mustLease(t, s, 1, 10, time.Minute, 10); len(c.Events) != 0 {
			t.Fatalf("leased %v of a fully leased queue", offsetsOf(c))
		}
		st, tr := mustSettle(t, s, 1, KindAck, a.Events[1].LeaseID)
		wantStatuses(t, st, StatusAcked)
		if tr.Count != 0 {
			t.Fatalf("an acknowledged event behind an unacknowledged one was trimmed: %+v", tr)
		}
		if n, _ := s.Len(ctx, 1); n != 5 {
			t.Fatalf("queue length %d, want 5", n)
		}
		st, tr = mustSettle(t, s, 1, KindAck, a.Events[0].LeaseID, a.Events[1].LeaseID, "nonsense", strings.Replace(a.Events[0].LeaseID, "-0-", "-9-", 1))
		wantStatuses(t, st, StatusAcked, StatusAlreadyAcked, StatusUnknown, StatusUnknown)
		if tr.Count != 2 || tr.Front != 2 || tr.LastID != ev(2).ID {
			t.Fatalf("trimmed %+v, want the first two", tr)
		}
		if off, _ := s.Offset(ctx, 1); off != 2 {
			t.Fatalf("front offset %d, want 2", off)
		}
		st, _ = mustSettle(t, s, 1, KindRetry, a.Events[0].LeaseID)
		wantStatuses(t, st, StatusAlreadyAcked)
		if leased, _, _ := s.LeaseCounts(ctx, 1, DeadPolicy{}); leased != 3 {
			t.Fatalf("leased %d, want 3", leased)
		}
		st, _ = mustSettle(t, s, 2, KindAck, b.Events[0].LeaseID)
		wantStatuses(t, st, StatusUnknown) // another tenant's lease id
	})

	t.Run("expired events come back lowest offset first", func(t *testing.T) {
		// One call's events share an expiry, and Redis orders equal scores as strings: 10
		// before 9.
		appendN(t, s, 20, 0, 25)
		mustLease(t, s, 20, 25, time.Second, 10)
		var back LeaseResult
		testenv.Eventually(t, 5*time.Second, "the expired events leased again", func() bool {
			back = mustLease(t, s, 20, 12, time.Minute, 10)
			return len(back.Events) > 0
		})
		if want := []int64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}; !slices.Equal(offsetsOf(back), want) {
			t.Fatalf("leased again %v, want %v", offsetsOf(back), want)
		}
		rest := mustLease(t, s, 20, 100, time.Minute, 10)
		if want := []int64{12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24}; !slices.Equal(offsetsOf(rest), want) {
			t.Fatalf("then %v, want %v", offsetsOf(rest), want)
		}
	})

	t.Run("an expired lease comes back with its deliveries counted", func(t *testing.T) {
		appendN(t, s, 3, 1, 3)
		first := mustLease(t, s, 3, 1, time.Second, 10)
		var again LeaseResult
		testenv.Eventually(t, 5*time.Second, "the expired event is leased again", func() bool {
			again = mustLease(t, s, 3, 1, time.Minute, 10)
			return len(again.Events) == 1 && again.Events[0].Offset == 0
		})
		if again.Events[0].Deliveries != 2 || again.Events[0].LeaseID == first.Events[0].LeaseID {
			t.Fatalf("leased again %+v", again.Events[0])
		}
		st, _ := mustSettle(t, s, 3, KindExtend, first.Events[0].LeaseID)
		wantStatuses(t, st, StatusExpired)
		st, _ = mustSettle(t, s, 3, KindRetry, first.Events[0].LeaseID)
		wantStatuses(t, st, StatusExpired)
		st, _ = mustSettle(t, s, 3, KindExtend, again.Events[0].LeaseID)
		wantStatuses(t, st, StatusExtended)
		st, tr := mustSettle(t, s, 3, KindAck, first.Events[0].LeaseID, again.Events[0].LeaseID)
		wantStatuses(t, st, StatusAcked, StatusAlreadyAcked)
		if tr.Count != 1 {
			t.Fatalf("trimmed %+v", tr)
		}
	})

	t.Run("a retried event is leased again at once and goes to the dead letters after max deliveries", func(t *testing.T) {
		appendN(t, s, 4, 1, 3)
		var last string
		for d := int64(1); d <= 2; d++ {
			res := mustLease(t, s, 4, 1, time.Minute, 2)
			if len(res.Events) != 1 || res.Events[0].Offset != 0 || res.Events[0].Deliveries != d {
				t.Fatalf("lease %d: %+v", d, res.Events)
			}
			last = res.Events[0].LeaseID
			st, _ := mustSettle(t, s, 4, KindRetry, last)
			wantStatuses(t, st, StatusRetried)
		}
		res := mustLease(t, s, 4, 5, time.Minute, 2)
		if !slices.Equal(offsetsOf(res), []int64{1}) || res.Trimmed.Count != 1 || res.Trimmed.Front != 1 {
			t.Fatalf("after max deliveries leased %v, trimmed %+v", offsetsOf(res), res.Trimmed)
		}
		st, _ := mustSettle(t, s, 4, KindAck, last)
		wantStatuses(t, st, StatusTrimmed)
		dead, _, err := s.DeadLetters(ctx, 4, 10, DeadPolicy{})
		if err != nil || len(dead) != 1 || dead[0] != `{"offset":0,"deliveries":2,"event":`+string(ev(1).JSON)+`}` {
			t.Fatalf("dead letters %q, %v", dead, err)
		}
		if _, n, _ := s.LeaseCounts(ctx, 4, DeadPolicy{}); n != 1 {
			t.Fatalf("dead letter count %d", n)
		}
		if err := s.DropDeadLetters(ctx, 4, 1); err != nil {
			t.Fatal(err)
		}
		if dead, _, _ := s.DeadLetters(ctx, 4, 10, DeadPolicy{}); len(dead) != 0 {
			t.Fatalf("dead letters left: %q", dead)
		}
	})

	t.Run("a plain trim ends the leases of what it removes", func(t *testing.T) {
		appendN(t, s, 5, 1, 4)
		res := mustLease(t, s, 5, 3, time.Minute, 10)
		if _, err := s.Trim(ctx, 5, 2, -1); err != nil {
			t.Fatal(err)
		}
		st, tr := mustSettle(t, s, 5, KindAck, res.Events[0].LeaseID, res.Events[1].LeaseID, res.Events[2].LeaseID)
		wantStatuses(t, st, StatusTrimmed, StatusTrimmed, StatusAcked)
		if tr.Count != 1 || tr.Front != 3 {
			t.Fatalf("trimmed %+v", tr)
		}
		if leased, _, _ := s.LeaseCounts(ctx, 5, DeadPolicy{}); leased != 0 {
			t.Fatalf("leased %d after everything left", leased)
		}
	})

	t.Run("a rebuild forgets every lease", func(t *testing.T) {
		appendN(t, s, 6, 1, 3)
		res := mustLease(t, s, 6, 2, time.Minute, 10)
		if err := s.BeginRebuild(ctx, 6, 0); err != nil {
			t.Fatal(err)
		}
		if err := s.EndRebuild(ctx, 6); err != nil {
			t.Fatal(err)
		}
		if out := s.Drain(ctx, time.Now(), Batch{TenantID: 6, Events: []Event{ev(1), ev(2)}}); out.Appended != 2 {
			t.Fatalf("drain after the rebuild: %+v", out)
		}
		st, _ := mustSettle(t, s, 6, KindAck, res.Events[0].LeaseID)
		wantStatuses(t, st, StatusUnknown)
		again := mustLease(t, s, 6, 2, time.Minute, 10)
		if !slices.Equal(offsetsOf(again), []int64{0, 1}) || again.Events[0].Deliveries != 1 {
			t.Fatalf("after the rebuild leased %+v", again.Events)
		}
	})

	t.Run("never more than MaxLeased events are leased at once", func(t *testing.T) {
		appendN(t, s, 7, 1, 1000)
		appendN(t, s, 7, 1000, MaxLeased+50)
		total := 0
		for range 11 {
			total += len(mustLease(t, s, 7, 1000, time.Minute, 10).Events)
		}
		if total != MaxLeased {
			t.Fatalf("leased %d, want %d", total, MaxLeased)
		}
	})

	t.Run("concurrent consumers get every event once", func(t *testing.T) {
		const n = 600
		appendN(t, s, 8, 0, n)
		var mu sync.Mutex
		seen := map[int64]int{}
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					res, err := s.Lease(ctx, 8, LeaseArgs{Limit: 7, Visibility: time.Minute, MaxDeliveries: 10})
					if err != nil {
						t.Error(err)
						return
					}
					if len(res.Events) == 0 {
						return
					}
					items := make([]AckItem, len(res.Events))
					mu.Lock()
					for i, e := range res.Events {
						seen[e.Offset]++
						items[i] = AckItem{Kind: KindAck, LeaseID: e.LeaseID}
					}
					mu.Unlock()
					if _, _, err := s.Settle(ctx, 8, items, time.Minute); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		for o := int64(0); o < n; o++ {
			if seen[o] != 1 {
				t.Fatalf("offset %d leased %d times", o, seen[o])
			}
		}
		if l, _ := s.Len(ctx, 8); l != 0 {
			t.Fatalf("queue length %d after every event was acknowledged", l)
		}
		if off, _ := s.Offset(ctx, 8); off != n {
			t.Fatalf("front %d, want %d", off, n)
		}
	})
}

// A lease hands out no more events than fit in MaxPageBytes at the size of the queue's
// largest event, and at least one; those it did not hand out come with the next lease.
func TestLeaseIsBoundedByBytes(t *testing.T) {
	s := New(testenv.StartRedis(t).Client())
	t.Cleanup(s.Close)
	ctx := context.Background()
	b := Batch{TenantID: 1}
	for i := range 10 {
		head := fmt.Sprintf(`{"id":"%04d","p":"`, i)
		b.Events = append(b.Events, Event{ID: fmt.Sprint(i), JSON: []byte(head + strings.Repeat("x", 3000-len(head)-2) + `"}`)})
	}
	if out := s.AppendOnce(ctx, time.Now(), []Batch{b}); out[0].Err != nil {
		t.Fatal(out[0].Err)
	}
	for _, tc := range []struct {
		maxBytes int64
		want     []int64
	}{
		{3*3001 - 1, []int64{0, 1, 2}}, // exactly three
		{3*3001 - 2, []int64{3, 4}},
		{100, []int64{5}}, // one, larger than the bound
		{1 << 20, []int64{6, 7, 8, 9}},
	} {
		s.MaxPageBytes = tc.maxBytes
		res := mustLease(t, s, 1, 100, time.Minute, 10)
		if got := offsetsOf(res); !slices.Equal(got, tc.want) {
			t.Fatalf("%d bytes: leased %v, want %v", tc.maxBytes, got, tc.want)
		}
	}
}
