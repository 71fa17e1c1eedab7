package eventqueue

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// killN sends n events of tenant (appended from offset from) to the dead letters: leased
// once with MaxDeliveries 1, retried, and leased again.
func killN(t *testing.T, s *Store, tenant uint64, from, n int, policy DeadPolicy) LeaseResult {
	t.Helper()
	ctx := context.Background()
	appendN(t, s, tenant, from, from+n)
	res, err := s.Lease(ctx, tenant, LeaseArgs{Limit: n, Visibility: time.Minute, MaxDeliveries: 1, Dead: policy})
	if err != nil || len(res.Events) != n {
		t.Fatalf("lease: %v, %d events", err, len(res.Events))
	}
	ids := make([]string, n)
	for i, e := range res.Events {
		ids[i] = e.LeaseID
	}
	mustSettle(t, s, tenant, KindRetry, ids...)
	res, err = s.Lease(ctx, tenant, LeaseArgs{Limit: n, Visibility: time.Minute, MaxDeliveries: 1, Dead: policy})
	if err != nil || len(res.Events) != 0 || res.DeadAdded != int64(n) {
		t.Fatalf("second lease: %v, %d events, %d dead", err, len(res.Events), res.DeadAdded)
	}
	return res
}

func deadOffsets(t *testing.T, s *Store, tenant uint64, policy DeadPolicy) string {
	t.Helper()
	letters, _, err := s.DeadLetters(context.Background(), tenant, 1000, policy)
	if err != nil {
		t.Fatal(err)
	}
	out := ""
	for _, l := range letters {
		var o int
		fmt.Sscanf(l, `{"offset":%d`, &o)
		out += fmt.Sprintf("%d ", o)
	}
	return out
}

func TestDeadLettersAreBounded(t *testing.T) {
	for name, s := range leaseStores(t) {
		t.Run(name, func(t *testing.T) { testDeadLettersAreBounded(t, s) })
	}
}

func testDeadLettersAreBounded(t *testing.T, s *Store) {
	ctx := context.Background()
	t.Run("past the cap the oldest go first", func(t *testing.T) {
		policy := DeadPolicy{Max: 3}
		killN(t, s, 1, 0, 2, policy)
		res := killN(t, s, 1, 2, 3, policy)
		if res.DeadDropped != 2 {
			t.Fatalf("dropped %d, want 2", res.DeadDropped)
		}
		if got := deadOffsets(t, s, 1, policy); got != "2 3 4 " {
			t.Fatalf("dead letters at offsets %q, want 2 3 4", got)
		}
		if _, n, _ := s.LeaseCounts(ctx, 1, policy); n != 3 {
			t.Fatalf("count %d", n)
		}
		// Dropping by a consumer keeps the times in step: the next one to go is still the oldest.
		if err := s.DropDeadLetters(ctx, 1, 1); err != nil {
			t.Fatal(err)
		}
		if n, _ := s.rdb.LLen(ctx, DeadAtKey(1)).Result(); n != 2 {
			t.Fatalf("%d times for 2 dead letters", n)
		}
		// Counts past 2^53 (inexact in Lua) and past 10^14 (which Lua prints as 1e+14) drop
		// every dead letter and no more.
		for _, count := range []int64{99999999999999990, 100000000000000000, 1<<63 - 1} {
			if err := s.DropDeadLetters(ctx, 1, count); err != nil {
				t.Fatalf("drop %d: %v", count, err)
			}
		}
		if n, _ := s.rdb.LLen(ctx, DeadKey(1)).Result(); n != 0 {
			t.Fatalf("%d dead letters left", n)
		}
		if n, _ := s.rdb.LLen(ctx, DeadAtKey(1)).Result(); n != 0 {
			t.Fatalf("%d times left", n)
		}
	})
	t.Run("each goes once older than the retention", func(t *testing.T) {
		policy := DeadPolicy{Retention: time.Hour}
		killN(t, s, 2, 0, 2, policy)
		short := DeadPolicy{Retention: 300 * time.Millisecond}
		if got := deadOffsets(t, s, 2, short); got != "0 1 " {
			t.Fatalf("at once: %q", got)
		}
		// A third one a while later: the first two expire before it.
		time.Sleep(150 * time.Millisecond) // spaces the dead letters' times; not a synchronisation
		killN(t, s, 2, 2, 1, policy)
		deadline := time.Now().Add(5 * time.Second)
		for got := deadOffsets(t, s, 2, short); got != "2 "; got = deadOffsets(t, s, 2, short) {
			if got != "0 1 2 " || time.Now().After(deadline) {
				t.Fatalf("dead letters %q: want 0 1 2 until the first two expire, then 2", got)
			}
			time.Sleep(10 * time.Millisecond)
		}
		for {
			dropped, left, err := s.PruneDeadLetters(ctx, 2, short)
			if err != nil || dropped > 1 || left > 1 {
				t.Fatalf("prune: %v, dropped %d, left %d", err, dropped, left)
			}
			if left == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the last dead letter never expired")
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
	t.Run("dead letters of a version that kept no times are kept a whole retention", func(t *testing.T) {
		for i := 0; i < 3; i++ {
			s.rdb.RPush(ctx, DeadKey(3), fmt.Sprintf(`{"offset":%d,"deliveries":10,"event":{}}`, i))
		}
		policy := DeadPolicy{Retention: time.Hour}
		if got := deadOffsets(t, s, 3, policy); got != "0 1 2 " {
			t.Fatalf("%q", got)
		}
		if n, _ := s.rdb.LLen(ctx, DeadAtKey(3)).Result(); n != 3 {
			t.Fatalf("%d times", n)
		}
		if _, n, _ := s.LeaseCounts(ctx, 3, DeadPolicy{Max: 1}); n != 1 {
			t.Fatalf("with a cap of 1: %d", n)
		}
		if got := deadOffsets(t, s, 3, policy); got != "2 " {
			t.Fatalf("after the cap %q", got)
		}
	})
}
