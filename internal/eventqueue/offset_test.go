package eventqueue

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eventq/eventq/internal/clock"
	"github.com/eventq/eventq/internal/testenv"
)

func ev(i int) Event {
	id := fmt.Sprintf("0000000%d-0000-7000-8000-000000000000", i)
	return Event{ID: id, JSON: []byte(fmt.Sprintf(`{"id":"%s","n":%d}`, id, i))}
}

func appendN(t *testing.T, s *Store, tenant uint64, from, to int) {
	t.Helper()
	var b Batch
	b.TenantID = tenant
	for i := from; i < to; i++ {
		b.Events = append(b.Events, ev(i))
	}
	if out := s.AppendOnce(context.Background(), time.Now(), []Batch{b}); out[0].Err != nil || out[0].Appended != to-from {
		t.Fatalf("append %d..%d: %+v", from, to, out[0])
	}
}

func readAll(t *testing.T, s *Store, tenant uint64, limit int) (string, int64) {
	t.Helper()
	page, err := s.ReadPage(context.Background(), tenant, limit)
	if err != nil {
		t.Fatal(err)
	}
	defer page.Release()
	return pageString(t, page), page.Offset
}

func stores(t *testing.T) map[string]*Store {
	single := New(testenv.StartRedis(t).Client())
	cluster := New(testenv.StartRedisCluster(t).Client())
	slow := &Store{rdb: testenv.StartRedis(t).Client()} // the go-redis read path
	t.Cleanup(func() { single.Close(); cluster.Close() })
	return map[string]*Store{"single": single, "cluster": cluster, "go-redis path": slow}
}

// A read returns the front offset with its events, atomically; a trim with the read's offset
// removes only what the read returned, however often it is retried, and events appended
// between the read and the trim stay.
func TestOffsetTrimsAreIdempotent(t *testing.T) {
	for name, s := range stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			appendN(t, s, 1, 1, 6) // events 1..5
			body, off := readAll(t, s, 1, 3)
			if off != 0 || body != `{"id":"00000001-0000-7000-8000-000000000000","n":1},{"id":"00000002-0000-7000-8000-000000000000","n":2},{"id":"00000003-0000-7000-8000-000000000000","n":3}` {
				t.Fatalf("read: offset %d, %s", off, body)
			}
			appendN(t, s, 1, 6, 8) // arrive between the read and the trim
			for attempt := range 3 {
				tr, err := s.Trim(ctx, 1, 3, off)
				if err != nil {
					t.Fatal(err)
				}
				want := Trimmed{Count: 3, Front: 3, LastID: "00000003-0000-7000-8000-000000000000"}
				if attempt > 0 {
					want = Trimmed{Front: 3}
				}
				if tr != want {
					t.Fatalf("trim attempt %d: %+v, want %+v", attempt, tr, want)
				}
			}
			if n, _ := s.Len(ctx, 1); n != 4 {
				t.Fatalf("length %d after retried trims, want 4 (events 4..7)", n)
			}
			// A trim overlapping what was trimmed removes only the rest of its range.
			if tr, err := s.Trim(ctx, 1, 3, 2); err != nil || tr.Count != 2 || tr.Front != 5 {
				t.Fatalf("overlapping trim: %+v %v", tr, err)
			}
			if _, off := readAll(t, s, 1, 0); off != 5 {
				t.Fatalf("front %d, want 5", off)
			}
			// An offset beyond the front: the queue was lost since the read.
			var ahead *ErrOffsetAhead
			if _, err := s.Trim(ctx, 1, 1, 6); !errors.As(err, &ahead) || ahead.Front != 5 {
				t.Fatalf("offset ahead: %v", err)
			}
			if n, _ := s.Len(ctx, 1); n != 2 {
				t.Fatalf("length %d after a refused trim, want 2", n)
			}
			// Without an offset, a trim removes count events, as the original API defines it.
			if tr, err := s.Trim(ctx, 1, 10, -1); err != nil || tr.Count != 2 || tr.Front != 7 {
				t.Fatalf("plain trim: %+v %v", tr, err)
			}
			if got, _ := s.Offset(ctx, 1); got != 7 {
				t.Fatalf("offset %d, want 7", got)
			}
		})
	}
}

// Offsets stay exact under concurrent readers trimming with retries: every event is trimmed
// once, and the front ends at the number of events.
func TestConcurrentOffsetTrimsRemoveEachEventOnce(t *testing.T) {
	s := New(testenv.StartRedis(t).Client())
	defer s.Close()
	ctx := context.Background()
	const total = 2000
	for i := 0; i < total; i += 500 {
		appendN(t, s, 9, i+10000, i+10500)
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				page, err := s.ReadPage(ctx, 9, 37)
				if err != nil {
					t.Error(err)
					return
				}
				n, off := page.Count, page.Offset
				page.Release()
				if n == 0 {
					return
				}
				for range 2 { // every trim sent twice, as after a lost response
					if _, err := s.Trim(ctx, 9, int64(n), off); err != nil {
						var ahead *ErrOffsetAhead
						if !errors.As(err, &ahead) {
							t.Error(err)
						}
					}
				}
			}
		}()
	}
	wg.Wait()
	if off, _ := s.Offset(ctx, 9); off != total {
		t.Fatalf("front %d, want %d", off, total)
	}
}

// The limit bounds a read; 0 or above MaxRead means MaxRead.
func TestReadLimit(t *testing.T) {
	s := New(testenv.StartRedis(t).Client())
	defer s.Close()
	appendN(t, s, 2, 1, 5)
	for limit, want := range map[int]int{1: 1, 3: 3, 4: 4, 0: 4, MaxRead + 1: 4} {
		page, err := s.ReadPage(context.Background(), 2, limit)
		if err != nil || page.Count != want {
			t.Fatalf("limit %d: %d events (%v), want %d", limit, page.Count, err, want)
		}
		page.Release()
	}
}

// An append to an empty queue wakes a watcher subscribed on another connection (another
// process's Waiter), on a single Redis and on a cluster; an append to a non-empty queue does
// not publish.
func TestWaiterWakesOnAppendToAnEmptyQueue(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for name, s := range map[string]*Store{
		"single":  New(testenv.StartRedis(t).Client()),
		"cluster": New(testenv.StartRedisCluster(t).Client()),
	} {
		t.Run(name, func(t *testing.T) {
			defer s.Close()
			w := NewWaiter(s.rdb, clock.Real{}, log)
			defer w.Close()
			ctx := context.Background()
			for _, tenant := range []uint64{3, 4, 5} { // different slots on a cluster
				wake, release := w.Watch(ctx, tenant)
				select {
				case <-wake:
					t.Fatalf("tenant %d woken before any append", tenant)
				case <-time.After(50 * time.Millisecond):
				}
				appendN(t, s, tenant, 1, 2)
				select {
				case <-wake:
				case <-time.After(5 * time.Second):
					t.Fatalf("tenant %d: no wake within 5 s of the append", tenant)
				}
				release()
				wake, release = w.Watch(ctx, tenant)
				appendN(t, s, tenant, 2, 3) // the queue is not empty: no publish
				select {
				case <-wake:
					t.Fatalf("tenant %d woken by an append to a non-empty queue", tenant)
				case <-time.After(100 * time.Millisecond):
				}
				release()
			}
			w.Close()
			if wake, _ := w.Watch(ctx, 3); wake != nil {
				t.Fatal("a closed waiter still waits")
			}
		})
	}
}

// While a rebuild holds a tenant, every append is held, draining included; the queue is
// emptied and takes the given front offset.
func TestRebuildHoldsEveryAppend(t *testing.T) {
	for name, s := range map[string]*Store{
		"single":  New(testenv.StartRedis(t).Client()),
		"cluster": New(testenv.StartRedisCluster(t).Client()),
	} {
		t.Run(name, func(t *testing.T) {
			defer s.Close()
			testRebuildHoldsEveryAppend(t, s)
		})
	}
}

func testRebuildHoldsEveryAppend(t *testing.T, s *Store) {
	ctx := context.Background()
	appendN(t, s, 6, 1, 4)
	if err := s.BeginRebuild(ctx, 6, 42); err != nil {
		t.Fatal(err)
	}
	if n, _ := s.Len(ctx, 6); n != 0 {
		t.Fatalf("length %d after BeginRebuild", n)
	}
	b := Batch{TenantID: 6, Events: []Event{ev(1)}}
	if out := s.Drain(ctx, time.Now(), b); out.Held != 1 || out.Appended != 0 {
		t.Fatalf("drain during a rebuild: %+v", out)
	}
	if out := s.AppendOnce(ctx, time.Now(), []Batch{b})[0]; out.Held != 1 {
		t.Fatalf("append during a rebuild: %+v", out)
	}
	if err := s.EndRebuild(ctx, 6); err != nil {
		t.Fatal(err)
	}
	// The event was in the queue before the rebuild: its deduplication entry went with it.
	if out := s.Drain(ctx, time.Now(), b); out.Appended != 1 {
		t.Fatalf("drain after the rebuild: %+v", out)
	}
	if _, off := readAll(t, s, 6, 0); off != 42 {
		t.Fatalf("front %d, want 42", off)
	}
	mark, err := s.HoldMark(ctx, 6)
	if err != nil || mark == "" {
		t.Fatalf("no hold mark after the rebuild (%v): new events could overtake restored ones", err)
	}
	if ids, _ := s.HeldTenants(ctx); len(ids) != 1 || ids[0] != 6 {
		t.Fatalf("held tenants %v", ids)
	}
}

// Reads racing trims always pair events with the offset of their first one: the first event
// of every read is the one at that absolute position.
func TestReadsRacingTrimsReturnTheirFrontOffset(t *testing.T) {
	s := New(testenv.StartRedis(t).Client())
	defer s.Close()
	ctx := context.Background()
	const total = 3000
	for i := 0; i < total; i += 500 {
		appendN(t, s, 11, i+10000, i+10500) // event at absolute position p is ev(10000+p)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < total; i++ {
			if _, err := s.Trim(ctx, 11, 1, -1); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	reads := 0
	for {
		select {
		case <-done:
			if reads == 0 {
				t.Fatal("no read ran beside the trims")
			}
			return
		default:
		}
		page, err := s.ReadPage(ctx, 11, 5)
		if err != nil {
			t.Fatal(err)
		}
		body := pageString(t, page)
		if page.Count > 0 {
			want := fmt.Sprintf(`{"id":"%s"`, ev(10000+int(page.Offset)).ID)
			if body[:len(want)] != want {
				t.Fatalf("offset %d, first event %.60s, want %s", page.Offset, body, want)
			}
		}
		page.Release()
		reads++
	}
}

// Waiting reads cost no Redis connection: a hundred of them on twenty tenants share the
// Waiter's one subscription.
func TestWaitingReadsShareOneConnection(t *testing.T) {
	rdb := testenv.StartRedis(t).Client()
	s := New(rdb)
	defer s.Close()
	w := NewWaiter(rdb, clock.Real{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	defer w.Close()
	ctx := context.Background()
	clients := func() int { return strings.Count(rdb.ClientList(ctx).Val(), "\n") }
	before := clients()
	var wakes []<-chan struct{}
	for tenant := uint64(1); tenant <= 20; tenant++ {
		for range 5 {
			wake, release := w.Watch(ctx, tenant)
			defer release()
			wakes = append(wakes, wake)
		}
	}
	if got := clients(); got > before+1 {
		t.Fatalf("%d Redis connections with 100 waiting reads, %d before: want one more at most", got, before)
	}
	appendN(t, s, 7, 1, 2)
	for i := 30; i < 35; i++ { // tenant 7's five waits
		select {
		case <-wakes[i]:
		case <-time.After(5 * time.Second):
			t.Fatalf("wait %d of tenant 7 not woken", i)
		}
	}
}
