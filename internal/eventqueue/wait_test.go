package eventqueue

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/eventq/eventq/internal/clock"
	"github.com/eventq/eventq/internal/testenv"
)

// stallDialer dials real connections whose writes stall while they contain the armed
// pattern, until the test lets them go: a Redis round trip that does not come back.
type stallDialer struct {
	mu      sync.Mutex
	pattern []byte
	held    chan struct{} // closed at the first stalled write
	release chan struct{} // closed to let stalled writes through
	once    sync.Once
}

func newStallDialer(t *testing.T) *stallDialer {
	d := &stallDialer{held: make(chan struct{}), release: make(chan struct{})}
	t.Cleanup(d.let)
	return d
}

// arm makes writes containing pattern stall.
func (d *stallDialer) arm(pattern string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.pattern = []byte(pattern)
}

func (d *stallDialer) let() {
	d.mu.Lock()
	defer d.mu.Unlock()
	select {
	case <-d.release:
	default:
		close(d.release)
	}
}

func (d *stallDialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &stallConn{Conn: c, d: d}, nil
}

type stallConn struct {
	net.Conn
	d *stallDialer
}

func (c *stallConn) Write(p []byte) (int, error) {
	c.d.mu.Lock()
	stall := c.d.pattern != nil && bytes.Contains(p, c.d.pattern)
	c.d.mu.Unlock()
	if stall {
		c.d.once.Do(func() { close(c.d.held) })
		<-c.d.release
	}
	return c.Conn.Write(p)
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// mustWatchReady watches tenant and fails unless the wait is confirmed (not a fallback poll).
func mustWatchReady(t *testing.T, w *Waiter, tenant uint64) (<-chan struct{}, func()) {
	t.Helper()
	wake, release := w.Watch(context.Background(), tenant)
	select {
	case <-wake:
		t.Fatalf("tenant %d: wake channel fired before any append (subscription not confirmed)", tenant)
	case <-time.After(fallbackPoll + 100*time.Millisecond):
	}
	return wake, release
}

// watchWithin runs Watch in the background and fails if it has not returned within d.
func watchWithin(t *testing.T, w *Waiter, tenant uint64, d time.Duration) (<-chan struct{}, func()) {
	t.Helper()
	type res struct {
		wake    <-chan struct{}
		release func()
	}
	done := make(chan res, 1)
	go func() {
		wake, release := w.Watch(context.Background(), tenant)
		done <- res{wake, release}
	}()
	select {
	case r := <-done:
		return r.wake, r.release
	case <-time.After(d):
		t.Fatalf("Watch of tenant %d, already subscribed, still blocked after %v behind another tenant's stalled Redis call", tenant, d)
		return nil, nil
	}
}

// A subscribe that Redis does not answer holds up neither the waits of tenants already
// subscribed nor, on another node, their wake-ups.
func TestWaiterIsNotStalledBySlowSubscribe(t *testing.T) {
	t.Run("a subscribed tenant's wait goes on while another tenant's subscribe stalls", func(t *testing.T) {
		r := testenv.StartRedis(t)
		d := newStallDialer(t)
		rdb := redis.NewClient(&redis.Options{Addr: r.Addr(), Dialer: d.dial})
		defer rdb.Close()
		w := NewWaiter(rdb, clock.Real{}, quietLog())
		defer w.Close()
		_, release1 := mustWatchReady(t, w, 1)
		defer release1()
		defer d.let() // before anything that waits for the Waiter
		d.arm(WakeChannel(2))
		go w.Watch(context.Background(), 2)
		select {
		case <-d.held:
		case <-time.After(5 * time.Second):
			t.Fatal("the subscribe of tenant 2 never reached the connection")
		}
		wake, release := watchWithin(t, w, 1, 2*time.Second)
		defer release()
		if wake == nil {
			t.Fatal("no wake channel for tenant 1")
		}
	})

	t.Run("a subscribed tenant's wait goes on while an idle tenant's unsubscribe stalls", func(t *testing.T) {
		r := testenv.StartRedis(t)
		d := newStallDialer(t)
		rdb := redis.NewClient(&redis.Options{Addr: r.Addr(), Dialer: d.dial})
		defer rdb.Close()
		w := NewWaiter(rdb, clock.Real{}, quietLog())
		defer w.Close()
		_, release1 := mustWatchReady(t, w, 1)
		defer release1()
		defer d.let() // before anything that waits for the Waiter
		_, release3 := mustWatchReady(t, w, 3)
		release3()
		d.arm(WakeChannel(3))
		go w.unsubscribeIdle(time.Now().Add(2 * Linger))
		select {
		case <-d.held:
		case <-time.After(5 * time.Second):
			t.Fatal("the unsubscribe of tenant 3 never reached the connection")
		}
		_, release := watchWithin(t, w, 1, 2*time.Second)
		release()
	})

	t.Run("a tenant on another node is woken while a subscribe stalls", func(t *testing.T) {
		c := testenv.StartRedisCluster(t)
		d := newStallDialer(t)
		rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs, Dialer: d.dial})
		defer rdb.Close()
		s := New(c.Client())
		defer s.Close()
		ctx := context.Background()
		nodeOf := func(tenant uint64) string {
			m, err := rdb.MasterForKey(ctx, WakeChannel(tenant))
			if err != nil {
				t.Fatal(err)
			}
			return m.Options().Addr
		}
		first, other := uint64(1), uint64(0)
		for id := uint64(2); other == 0; id++ {
			if nodeOf(id) != nodeOf(first) {
				other = id
			}
		}
		w := NewWaiter(rdb, clock.Real{}, quietLog())
		defer w.Close()
		wake, release := mustWatchReady(t, w, first)
		defer release()
		defer d.let() // before anything that waits for the Waiter
		d.arm(WakeChannel(other))
		go w.Watch(ctx, other)
		select {
		case <-d.held:
		case <-time.After(5 * time.Second):
			t.Fatalf("the subscribe of tenant %d never reached the connection", other)
		}
		appendN(t, s, first, 1, 2)
		select {
		case <-wake:
		case <-time.After(2 * time.Second):
			t.Fatalf("tenant %d not woken within 2 s of its append while tenant %d's subscribe stalls on another node", first, other)
		}
	})
}

// A tenant unsubscribed for idleness and watched again at once is subscribed again: the
// append that follows wakes it.
func TestWaiterResubscribesATenantWatchedWhileItIsDropped(t *testing.T) {
	rdb := testenv.StartRedis(t).Client()
	s := New(rdb)
	defer s.Close()
	w := NewWaiter(rdb, clock.Real{}, quietLog())
	defer w.Close()
	_, release := mustWatchReady(t, w, 4)
	release()
	w.unsubscribeIdle(time.Now().Add(2 * Linger))
	wake, release := w.Watch(context.Background(), 4)
	defer release()
	if wake == nil {
		t.Fatal("no wake channel")
	}
	select {
	case <-wake:
		t.Fatal("woken before any append")
	case <-time.After(fallbackPoll + 100*time.Millisecond):
	}
	appendN(t, s, 4, 1, 2)
	select {
	case <-wake:
	case <-time.After(5 * time.Second):
		t.Fatal("not woken by the append")
	}
}

// A tenant's idle time is measured on the Waiter's clock: it is dropped once it has been idle
// for Linger on that clock, and not a moment before.
func TestWaiterMeasuresLingerOnItsClock(t *testing.T) {
	rdb := testenv.StartRedis(t).Client()
	clk := clock.NewFake(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC))
	w := NewWaiter(rdb, clk, quietLog())
	defer w.Close()
	subscribed := func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		_, ok := w.tenants[5]
		return ok
	}
	_, release := mustWatchReady(t, w, 5)
	release()
	idleSince := clk.Now()
	w.unsubscribeIdle(idleSince.Add(Linger - time.Nanosecond))
	if !subscribed() {
		t.Fatal("dropped before it was idle for Linger")
	}
	w.unsubscribeIdle(idleSince.Add(Linger))
	if subscribed() {
		t.Fatal("still subscribed after idle for Linger on the Waiter's clock")
	}
}
