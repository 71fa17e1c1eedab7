package eventqueue

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/eventq/eventq/internal/testenv"
)

// The events a lease call leased for the first time are read after its script: a trim in
// between moves the front under the list's indices, and a rebuild replaces the list. The read
// finds the events where they are now, leaves out those trimmed, and returns none after a
// rebuild; through the read path's own connections and through go-redis alike.
func TestFreshEventsFollowTheFront(t *testing.T) {
	for name, s := range leaseStores(t) {
		for i, path := range []string{"own connections", "go-redis"} {
			t.Run(name+"/"+path, func(t *testing.T) {
				store := s
				if path == "go-redis" {
					store = &Store{rdb: s.rdb}
				}
				testFreshEvents(t, store, uint64(7+i))
			})
		}
	}
}

func testFreshEvents(t *testing.T, s *Store, tenant uint64) {
	ctx := context.Background()
	t.Run("a read over many chunks", func(t *testing.T) {
		big := make([][]byte, 700) // 1.4 MB: the reply spans several of the reader's chunks
		for i := range big {
			big[i] = []byte(fmt.Sprintf(`{"n":%d,"pad":"%s"}`, i, strings.Repeat("x", 2000+i%7)))
		}
		if err := s.Append(ctx, tenant+100, big...); err != nil {
			t.Fatal(err)
		}
		epoch := strings.SplitN(mustLease(t, s, tenant+100, 1, time.Minute, 10).BatchID, "-", 2)[0]
		from, events, err := s.freshEvents(ctx, tenant+100, epoch, 0, 1, len(big)-1, nil)
		if err != nil || from != 1 || len(events) != len(big)-1 {
			t.Fatalf("%d events from %d: %v", len(events), from, err)
		}
		for i, e := range events {
			if e != string(big[i+1]) {
				t.Fatalf("event %d differs", i+1)
			}
		}
	})
	appendN(t, s, tenant, 0, 40)
	epoch := strings.SplitN(mustLease(t, s, tenant, 1, time.Minute, 10).BatchID, "-", 2)[0]
	want := func(from int64, events []string, err error, wantFrom, wantTo int64) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		var got []int64
		for i, e := range events {
			if e != string(ev(int(from)+i).JSON) {
				t.Fatalf("event %d is %s", from+int64(i), e)
			}
			got = append(got, from+int64(i))
		}
		if from != wantFrom || len(events) != int(wantTo-wantFrom) {
			t.Fatalf("read offsets %v from %d, want %d … %d", got, from, wantFrom, wantTo-1)
		}
	}
	from, events, err := s.freshEvents(ctx, tenant, epoch, 0, 10, 10, nil)
	want(from, events, err, 10, 20)

	for _, c := range []struct{ trimTo, wantFrom int64 }{{5, 10}, {15, 15}, {25, 20}} {
		front, _ := s.Offset(ctx, tenant)
		if _, err := s.Trim(ctx, tenant, c.trimTo-front, -1); err != nil {
			t.Fatal(err)
		}
		from, events, err = s.freshEvents(ctx, tenant, epoch, 0, 10, 10, nil) // as if the script saw the front at 0
		want(from, events, err, c.wantFrom, max(20, c.wantFrom))
	}
	from, events, err = s.freshEvents(ctx, tenant, epoch, 25, 30, 5, nil)
	want(from, events, err, 30, 35)

	if err := s.BeginRebuild(ctx, tenant, 25); err != nil {
		t.Fatal(err)
	}
	from, events, err = s.freshEvents(ctx, tenant, epoch, 25, 30, 5, nil)
	if err != nil || len(events) != 0 {
		t.Fatalf("after a rebuild: %d events from %d, %v", len(events), from, err)
	}
}

// One consumer's lease calls follow each other, so a lease call reads its new events in the
// script's round trip, at the offset where the last call ended. Whatever happens between two
// calls (another process's lease, a trim, a script cache flushed), every event is handed
// out once and as it is.
func TestLeaseReadsAhead(t *testing.T) {
	for name, s := range leaseStores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			const tenant = 21
			other := &Store{rdb: s.rdb, fast: newLRangeReader(s.rdb)} // another api process
			t.Cleanup(other.Close)
			appendN(t, s, tenant, 0, 2000)
			seen := map[int64]int{}
			aheads := 0
			lease := func(st *Store) LeaseResult {
				res := mustLease(t, st, tenant, 50, time.Minute, 10)
				for _, e := range res.Events {
					if e.Event != string(ev(int(e.Offset)).JSON) {
						t.Fatalf("offset %d holds %s", e.Offset, e.Event)
					}
					seen[e.Offset]++
				}
				if res.ReadAhead {
					aheads++
				}
				return res
			}
			ack := func(st *Store, res LeaseResult) {
				if _, _, err := st.Settle(ctx, tenant, []AckItem{{Kind: KindBatch, LeaseID: res.BatchID}}, time.Second); err != nil {
					t.Fatal(err)
				}
			}
			for i := 0; i < 8; i++ { // one consumer
				ack(s, lease(s))
			}
			if aheads < 5 {
				t.Fatalf("%d of 8 calls read ahead", aheads)
			}
			o := lease(other) // between two calls of the first process: its hint is wrong
			mine := lease(s)
			if !mine.ReadAhead || mine.Events[0].Offset != o.Events[len(o.Events)-1].Offset+1 {
				t.Fatalf("after another's lease: read ahead %v, from %d", mine.ReadAhead, mine.Events[0].Offset)
			}
			ack(other, o)
			ack(s, mine)
			mine = lease(s)
			if _, err := other.Trim(ctx, tenant, 30, -1); err != nil { // a trim under the next read ahead
				t.Fatal(err)
			}
			ack(s, mine)
			ack(s, lease(s))
			if err := s.rdb.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			ack(s, lease(s))
			for {
				res := lease(s)
				if len(res.Events) == 0 {
					break
				}
				ack(s, res)
			}
			front, _ := s.Offset(ctx, tenant)
			for o := front; o < 2000; o++ {
				if seen[o] != 1 {
					t.Fatalf("offset %d handed out %d times", o, seen[o])
				}
			}
			for o, n := range seen {
				if n != 1 {
					t.Fatalf("offset %d handed out %d times", o, n)
				}
			}
		})
	}
}

// A read ahead over a pooled connection to a Redis that restarted since falls back to
// go-redis: the script did not run, so it runs once, and the call leases as any other.
func TestLeaseReadsAheadAfterRedisRestarts(t *testing.T) {
	r := testenv.StartRedis(t)
	s := New(r.Client())
	t.Cleanup(s.Close)
	const tenant = 5
	appendN(t, s, tenant, 0, 300)
	var last LeaseResult
	for range 3 {
		last = mustLease(t, s, tenant, 50, time.Minute, 10)
		if _, _, err := s.Settle(context.Background(), tenant, []AckItem{{Kind: KindBatch, LeaseID: last.BatchID}}, time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if !last.ReadAhead {
		t.Fatal("the third call did not read ahead")
	}
	r.Stop()
	r.Start()
	res := mustLease(t, s, tenant, 50, time.Minute, 10)
	if len(res.Events) != 50 || res.Events[0].Offset != 150 || res.Events[0].Event != string(ev(150).JSON) {
		t.Fatalf("after the restart: %d events from %d", len(res.Events), res.Events[0].Offset)
	}
	if leased, _, _ := s.LeaseCounts(context.Background(), tenant, DeadPolicy{}); leased != 50 {
		t.Fatalf("%d leased, want 50: the script ran twice", leased)
	}
}
