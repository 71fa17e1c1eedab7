package eventqueue

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/eventq/eventq/internal/testenv"
)

// replyDelayer relays Redis's replies (testenv.StartProxy) and can hold back the next reply
// Redis sends, on whichever connection, and deliver it late: a reply that arrives after its
// reader gave up.
type replyDelayer struct {
	addr  string
	delay atomic.Int64 // for the next reply, in ns; 0 when not armed
	late  atomic.Int32 // replies held back and since delivered (or refused by a closed client)
}

func startReplyDelayer(t *testing.T, target string) *replyDelayer {
	d := &replyDelayer{}
	d.addr = testenv.StartProxy(t, target, func(client, server net.Conn) {
		d.replies(client, server)
		client.Close()
	})
	return d
}

// replies copies what server sends to client, holding back the first chunk read while armed.
func (d *replyDelayer) replies(client, server net.Conn) {
	buf := make([]byte, 64<<10)
	for {
		n, err := server.Read(buf)
		if err != nil {
			return
		}
		wait := time.Duration(d.delay.Swap(0))
		if wait > 0 {
			time.Sleep(wait)
		}
		_, err = client.Write(buf[:n])
		if wait > 0 {
			d.late.Add(1)
		}
		if err != nil {
			return
		}
	}
}

const lateTimeout = 200 * time.Millisecond

// storeBehindReplyDelayer is a Store whose client reaches Redis through a replyDelayer, made
// as internal/redisconn makes it but with a read timeout of lateTimeout.
func storeBehindReplyDelayer(t *testing.T) (*Store, *redis.Client, *replyDelayer) {
	proxy := startReplyDelayer(t, testenv.StartRedis(t).Addr())
	rdb := redis.NewClient(&redis.Options{Addr: proxy.addr, ReadTimeout: lateTimeout, ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	s := New(rdb)
	t.Cleanup(s.Close)
	return s, rdb, proxy
}

// A lease call whose reply comes after the connection's read timeout, the script having run,
// neither loses an event nor hands its reply to a later call: the connection it waited on is
// not used again, the events it leased come back once their visibility ends (a second
// delivery), and nothing is handed out twice while leased.
func TestALeaseWhoseReplyComesLateLosesNothing(t *testing.T) {
	s, rdb, proxy := storeBehindReplyDelayer(t)
	ctx := context.Background()
	const a, b = 7, 8
	appendN(t, s, a, 0, 300)
	appendN(t, s, b, 1000, 1300)

	// Three leases and acks of a's events, so that the next one reads ahead over a pooled
	// plain connection (TestLeaseReadsAhead).
	var last LeaseResult
	for range 3 {
		last = mustLease(t, s, a, 50, time.Minute, 10)
		mustSettle(t, s, a, KindBatch, last.BatchID)
	}
	if !last.ReadAhead {
		t.Fatal("the third call did not read ahead")
	}

	proxy.delay.Store(int64(3 * lateTimeout))
	lost, err := s.Lease(ctx, a, LeaseArgs{Limit: 50, Visibility: time.Second, MaxDeliveries: 10})
	var netErr net.Error
	if !errors.As(err, &netErr) || !netErr.Timeout() {
		t.Fatalf("the late lease answered %d events and %v, want a timeout", len(lost.Events), err)
	}
	if leased, _, err := s.LeaseCounts(ctx, a, DeadPolicy{}); err != nil || leased != 50 {
		t.Fatalf("%d leased (%v) after the late call, want its 50: the script ran once", leased, err)
	}
	testenv.Eventually(t, 5*time.Second, "the late reply delivered", func() bool { return proxy.late.Load() == 1 })

	// The next lease of a reads ahead over the pool the late reply came back to. a's events:
	// the 50 the late call leased come back once its second ends, delivered a second time; the
	// 100 after them are delivered at once, each once.
	deliveries := map[int64]int64{}
	calls := 0
	testenv.Eventually(t, 10*time.Second, "all of a's events handed out", func() bool {
		res := mustLease(t, s, a, 1000, time.Minute, 10)
		if calls++; calls == 1 && !res.ReadAhead {
			t.Fatal("the lease after the late one did not read ahead")
		}
		for _, e := range res.Events {
			if _, again := deliveries[e.Offset]; again || e.Event != string(ev(int(e.Offset)).JSON) {
				t.Fatalf("offset %d of a handed out twice while leased, or not its event: %s", e.Offset, e.Event)
			}
			deliveries[e.Offset] = e.Deliveries
		}
		if len(res.Events) > 0 {
			mustSettle(t, s, a, KindBatch, res.BatchID)
		}
		return len(deliveries) == 150
	})
	for o := int64(150); o < 300; o++ {
		want := int64(1)
		if o < 200 {
			want = 2
		}
		if deliveries[o] != want {
			t.Fatalf("offset %d of a: delivered %d times, want %d", o, deliveries[o], want)
		}
	}
	// Another tenant's calls get their own answers too.
	for i := range 10 {
		res := mustLease(t, s, b, 30, time.Minute, 10)
		if len(res.Events) != 30 {
			t.Fatalf("lease %d of b: %d events", i, len(res.Events))
		}
		for j, e := range res.Events {
			if want := int64(30*i + j); e.Offset != want || e.Event != string(ev(1000+int(want)).JSON) || e.Deliveries != 1 {
				t.Fatalf("lease %d of b, event %d: offset %d, deliveries %d, %s; want offset %d of b", i, j, e.Offset, e.Deliveries, e.Event, want)
			}
		}
		mustSettle(t, s, b, KindBatch, res.BatchID)
	}

	if n, err := rdb.LLen(ctx, Key(a)).Result(); err != nil || n != 0 {
		t.Fatalf("a's queue holds %d events (%v) once all were acknowledged", n, err)
	}
}

// A lease call that does not read ahead runs its script through go-redis, which sends it
// again when the reply is late: the call answers the second run's events, and the first
// run's come back once their visibility ends, each delivered a second time.
func TestALeaseThroughGoRedisWhoseReplyComesLateIsRunAgain(t *testing.T) {
	s, rdb, proxy := storeBehindReplyDelayer(t)
	ctx := context.Background()
	const c, warm = 9, 10
	appendN(t, s, c, 0, 100)
	appendN(t, s, warm, 0, 1)
	mustLease(t, s, warm, 1, time.Minute, 10) // a connection open and the script loaded
	proxy.delay.Store(int64(3 * lateTimeout))
	res := mustLease(t, s, c, 50, time.Second, 10)
	if res.ReadAhead || len(res.Events) != 50 || res.Events[0].Offset != 50 || res.Events[0].Deliveries != 1 {
		t.Fatalf("the late first lease answered %d events from %v (read ahead %v), want 50 from 50, the script's second run",
			len(res.Events), offsetsOf(res)[:min(1, len(res.Events))], res.ReadAhead)
	}
	testenv.Eventually(t, 5*time.Second, "the late reply delivered", func() bool { return proxy.late.Load() == 1 })
	mustSettle(t, s, c, KindBatch, res.BatchID)
	var back LeaseResult
	testenv.Eventually(t, 10*time.Second, "the first run's events back", func() bool {
		back = mustLease(t, s, c, 100, time.Minute, 10)
		return len(back.Events) > 0
	})
	for i, e := range back.Events {
		if e.Offset != int64(i) || e.Deliveries != 2 || e.Event != string(ev(i).JSON) {
			t.Fatalf("came back: offsets %v, event %d delivered %d times; want 0..49, each delivered twice", offsetsOf(back), i, e.Deliveries)
		}
	}
	if len(back.Events) != 50 {
		t.Fatalf("came back: offsets %v, want 0..49", offsetsOf(back))
	}
	mustSettle(t, s, c, KindBatch, back.BatchID)
	if n, err := rdb.LLen(ctx, Key(c)).Result(); err != nil || n != 0 {
		t.Fatalf("the queue holds %d events (%v) once all were acknowledged", n, err)
	}
}
