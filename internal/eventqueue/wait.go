package eventqueue

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// WakeChannel is the shard channel the append script publishes on when it appends to
// tenantID's empty queue. It carries the tenant's hash tag, so on a cluster it lives on the
// node of the tenant's queue and a publish goes to that node's subscribers only.
func WakeChannel(tenantID uint64) string {
	return fmt.Sprintf("eventqueue:{tenant:%d}:wake", tenantID)
}

// Waiter lets reads of an empty queue wait for its first event without polling Redis. A
// process has one: it subscribes (SSUBSCRIBE) to the wake channel of each tenant that has a
// waiting read, over one connection per Redis node, and fans each publish out in-process to
// every read waiting on that tenant. A waiting read costs a goroutine and a channel, never a
// connection. A tenant stays subscribed for a while after its last wait, because consumers
// wait again as soon as they have trimmed.
type Waiter struct {
	rdb redis.UniversalClient
	log *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	done   sync.WaitGroup

	mu      sync.Mutex
	closed  bool
	tenants map[uint64]*tenantWake
	subs    map[string]*redis.PubSub // by node address; "" for a single Redis
}

type tenantWake struct {
	node    string
	ready   chan struct{} // closed once Redis confirmed the subscription
	wake    chan struct{} // closed, and replaced, at each publish
	waiting int
	idle    time.Time // when waiting last dropped to 0
}

// Linger is how long a tenant stays subscribed after its last waiting read.
const Linger = 30 * time.Second

// fallbackPoll is how soon a wait gives up on a wake that cannot arrive (the subscription is
// not confirmed, Redis is unreachable): the reader re-reads, which is polling, slowly.
const fallbackPoll = 250 * time.Millisecond

// NewWaiter returns a Waiter on rdb, the connection that holds the queues. Close stops it.
func NewWaiter(rdb redis.UniversalClient, log *slog.Logger) *Waiter {
	w := &Waiter{rdb: rdb, log: log, tenants: map[uint64]*tenantWake{}, subs: map[string]*redis.PubSub{}}
	w.ctx, w.cancel = context.WithCancel(context.Background())
	w.done.Add(1)
	go w.sweep()
	return w
}

// Watch makes sure tenantID's wake channel is subscribed and returns a channel closed at the
// next append to the tenant's empty queue, and a release func to call once the wait is over.
// The caller reads the queue again after Watch returns and waits only if it is still empty:
// an append between the first read and the subscription is then seen by that read. If the
// subscription cannot be confirmed in time, the channel is closed after a short delay
// instead, so the caller polls rather than waits in vain. The channel is nil when there is
// nothing to wait for: the Waiter is closed or ctx is done.
func (w *Waiter) Watch(ctx context.Context, tenantID uint64) (<-chan struct{}, func()) {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil, func() {}
	}
	t, ok := w.tenants[tenantID]
	if !ok {
		t = &tenantWake{ready: make(chan struct{}), wake: make(chan struct{})}
		w.tenants[tenantID] = t
	}
	t.waiting++
	subscribe := !ok
	w.mu.Unlock()
	release := func() {
		w.mu.Lock()
		if t.waiting--; t.waiting == 0 {
			t.idle = time.Now()
		}
		w.mu.Unlock()
	}
	if subscribe {
		if err := w.subscribe(ctx, tenantID, t); err != nil {
			w.log.Warn("eventqueue: subscribe to wake channel failed", "tenant_id", tenantID, "err", err)
			w.forget(tenantID, t)
			return after(fallbackPoll), release
		}
	}
	confirm := time.NewTimer(time.Second)
	defer confirm.Stop()
	select {
	case <-t.ready:
	case <-confirm.C:
		return after(fallbackPoll), release
	case <-ctx.Done():
		return nil, release
	}
	w.mu.Lock()
	wake := t.wake
	w.mu.Unlock()
	return wake, release
}

func after(d time.Duration) <-chan struct{} {
	c := make(chan struct{})
	time.AfterFunc(d, func() { close(c) })
	return c
}

// subscribe adds tenantID's channel to the subscription of its node, starting one if needed.
func (w *Waiter) subscribe(ctx context.Context, tenantID uint64, t *tenantWake) error {
	channel := WakeChannel(tenantID)
	node := ""
	if c, ok := w.rdb.(*redis.ClusterClient); ok {
		master, err := c.MasterForKey(ctx, channel)
		if err != nil {
			return err
		}
		node = master.Options().Addr
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	t.node = node
	if ps, ok := w.subs[node]; ok {
		return ps.SSubscribe(ctx, channel)
	}
	ps := w.rdb.SSubscribe(ctx, channel)
	w.subs[node] = ps
	w.done.Add(1)
	go w.receive(node, ps)
	return nil
}

// forget drops t if it is still tenantID's entry, waking its waiters.
func (w *Waiter) forget(tenantID uint64, t *tenantWake) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.tenants[tenantID] == t {
		delete(w.tenants, tenantID)
		close(t.wake)
	}
}

// receive handles one node's subscription: confirmations, publishes, and errors. After an
// error (the connection broke; go-redis resubscribes on the next Receive) every tenant of the
// node is woken, since a publish may have been missed.
func (w *Waiter) receive(node string, ps *redis.PubSub) {
	defer w.done.Done()
	for {
		msg, err := ps.Receive(w.ctx)
		if w.ctx.Err() != nil {
			return
		}
		if err != nil {
			w.wakeNode(node)
			select {
			case <-time.After(fallbackPoll):
			case <-w.ctx.Done():
				return
			}
			continue
		}
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "ssubscribe" {
				w.confirm(m.Channel)
			}
		case *redis.Message:
			w.wakeChannel(m.Channel)
		}
	}
}

func tenantOf(channel string) (uint64, bool) {
	s, ok := strings.CutPrefix(channel, "eventqueue:{tenant:")
	if !ok {
		return 0, false
	}
	s, ok = strings.CutSuffix(s, "}:wake")
	if !ok {
		return 0, false
	}
	id, err := strconv.ParseUint(s, 10, 64)
	return id, err == nil
}

func (w *Waiter) confirm(channel string) {
	id, ok := tenantOf(channel)
	if !ok {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if t, ok := w.tenants[id]; ok {
		select {
		case <-t.ready:
		default:
			close(t.ready)
		}
	}
}

func (w *Waiter) wakeChannel(channel string) {
	id, ok := tenantOf(channel)
	if !ok {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if t, ok := w.tenants[id]; ok {
		t.fire()
	}
}

func (w *Waiter) wakeNode(node string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, t := range w.tenants {
		if t.node == node {
			t.fire()
		}
	}
}

// fire wakes t's waiters; the caller holds the Waiter's lock.
func (t *tenantWake) fire() {
	close(t.wake)
	t.wake = make(chan struct{})
}

// sweep unsubscribes tenants nobody has waited on for Linger.
func (w *Waiter) sweep() {
	defer w.done.Done()
	tick := time.NewTicker(Linger / 3)
	defer tick.Stop()
	for {
		select {
		case <-w.ctx.Done():
			return
		case now := <-tick.C:
			w.unsubscribeIdle(now)
		}
	}
}

func (w *Waiter) unsubscribeIdle(now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for id, t := range w.tenants {
		if t.waiting > 0 || now.Sub(t.idle) < Linger {
			continue
		}
		delete(w.tenants, id)
		if ps, ok := w.subs[t.node]; ok {
			ctx, cancel := context.WithTimeout(w.ctx, time.Second)
			if err := ps.SUnsubscribe(ctx, WakeChannel(id)); err != nil {
				w.log.Warn("eventqueue: unsubscribe from wake channel failed", "tenant_id", id, "err", err)
			}
			cancel()
		}
	}
}

// Closing is closed when Close is called.
func (w *Waiter) Closing() <-chan struct{} { return w.ctx.Done() }

// Close wakes every waiting read (so that a shutting-down server answers them at once), makes
// later Watch calls return at once, and closes the subscriptions.
func (w *Waiter) Close() {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return
	}
	w.closed = true
	for _, t := range w.tenants {
		close(t.wake)
	}
	w.tenants = map[uint64]*tenantWake{}
	subs := w.subs
	w.subs = map[string]*redis.PubSub{}
	w.mu.Unlock()
	w.cancel()
	for _, ps := range subs {
		ps.Close()
	}
	w.done.Wait()
}
