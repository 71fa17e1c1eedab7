package eventqueue

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/eventq/eventq/internal/clock"
)

// Waiter lets reads of an empty queue wait for its first event without polling Redis. A
// process has one: it subscribes (SSUBSCRIBE) to the wake channel of each tenant that has a
// waiting read, over one connection per Redis node, and fans each publish out in-process to
// every read waiting on that tenant. A waiting read costs a goroutine and a channel, never a
// connection. A tenant stays subscribed for a while after its last wait, because consumers
// wait again as soon as they have trimmed.
//
// No lock is held across a call to Redis: each node's subscribe and unsubscribe commands are
// sent by that node's own goroutine, in order, so a slow one holds up only the commands queued
// behind it on that connection, never a wait of an already subscribed tenant or a wake-up
// from another node.
type Waiter struct {
	rdb   redis.UniversalClient
	clock clock.Clock
	log   *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	done   sync.WaitGroup

	mu      sync.Mutex
	closed  bool
	tenants map[uint64]*tenantWake // the tenants to be subscribed
	nodes   map[string]*node       // by node address; "" for a single Redis
}

type tenantWake struct {
	node    *node
	ready   chan struct{} // closed once Redis confirmed the subscription
	failed  chan struct{} // closed when the subscription could not be sent
	wake    chan struct{} // closed, and replaced, at each publish
	waiting int
	idle    time.Time // when waiting last dropped to 0, on the Waiter's clock
}

// node is the subscription connection to one Redis node. Only its loop sends commands on it.
type node struct {
	addr string
	kick chan struct{} // the node's tenants changed; buffered, 1

	// Under the Waiter's lock: the entry each subscribed tenant's SSUBSCRIBE was sent for, and
	// how many SSUBSCRIBEs of each tenant Redis has not confirmed yet.
	subscribed  map[uint64]*tenantWake
	unconfirmed map[uint64]int

	ps *redis.PubSub // owned by the loop; nil until its first subscribe
}

func (n *node) poke() {
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

// Linger is how long a tenant stays subscribed after its last waiting read.
const Linger = 30 * time.Second

// fallbackPoll is how soon a wait gives up on a wake that cannot arrive (the subscription is
// not confirmed, Redis is unreachable): the reader re-reads, which is polling, slowly.
const fallbackPoll = 250 * time.Millisecond

// confirmWait is how long Watch waits for Redis to confirm a new subscription before it falls
// back to polling.
const confirmWait = time.Second

// commandTimeout bounds each subscribe or unsubscribe command.
const commandTimeout = 5 * time.Second

// NewWaiter returns a Waiter on rdb, the connection that holds the queues; clk decides when an
// idle tenant has lingered long enough. Close stops it.
func NewWaiter(rdb redis.UniversalClient, clk clock.Clock, log *slog.Logger) *Waiter {
	w := &Waiter{rdb: rdb, clock: clk, log: log, tenants: map[uint64]*tenantWake{}, nodes: map[string]*node{}}
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
	t, err := w.enter(ctx, tenantID)
	if err != nil {
		w.log.Warn("eventqueue: subscribe to wake channel failed", "tenant_id", tenantID, "err", err)
		return after(fallbackPoll), func() {}
	}
	if t == nil {
		return nil, func() {}
	}
	release := func() {
		w.mu.Lock()
		if t.waiting--; t.waiting == 0 {
			t.idle = w.clock.Now()
		}
		w.mu.Unlock()
	}
	confirm := time.NewTimer(confirmWait)
	defer confirm.Stop()
	select {
	case <-t.ready:
	case <-t.failed:
		return after(fallbackPoll), release
	case <-confirm.C:
		return after(fallbackPoll), release
	case <-ctx.Done():
		return nil, release
	case <-w.ctx.Done():
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

// enter counts a wait on tenantID and returns its entry; a new entry is handed to its node's
// loop to subscribe. It returns nil when the Waiter is closed.
func (w *Waiter) enter(ctx context.Context, tenantID uint64) (*tenantWake, error) {
	w.mu.Lock()
	if t, ok := w.tenants[tenantID]; ok || w.closed {
		if ok {
			t.waiting++
		}
		w.mu.Unlock()
		return t, nil
	}
	w.mu.Unlock()
	addr, err := w.nodeOf(ctx, tenantID)
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil, nil
	}
	t, ok := w.tenants[tenantID]
	if !ok {
		n := w.node(addr)
		t = &tenantWake{node: n, ready: make(chan struct{}), failed: make(chan struct{}), wake: make(chan struct{})}
		w.tenants[tenantID] = t
		if _, live := n.subscribed[tenantID]; live {
			w.adopt(n, tenantID, t)
		} else {
			n.poke()
		}
	}
	t.waiting++
	return t, nil
}

// nodeOf returns the address of the node that holds tenantID's wake channel; "" on a single
// Redis. On a cluster it asks the client's slot table, which may ask Redis.
func (w *Waiter) nodeOf(ctx context.Context, tenantID uint64) (string, error) {
	c, ok := w.rdb.(*redis.ClusterClient)
	if !ok {
		return "", nil
	}
	master, err := c.MasterForKey(ctx, WakeChannel(tenantID))
	if err != nil {
		return "", err
	}
	return master.Options().Addr, nil
}

// node returns the node at addr, starting its loop if it is new; the caller holds the lock.
func (w *Waiter) node(addr string) *node {
	n, ok := w.nodes[addr]
	if !ok {
		n = &node{addr: addr, kick: make(chan struct{}, 1), subscribed: map[uint64]*tenantWake{}, unconfirmed: map[uint64]int{}}
		w.nodes[addr] = n
		w.done.Add(1)
		go w.loop(n)
	}
	return n
}

// adopt makes t, a new entry of tenantID, take over the subscription a dropped entry still
// holds; t is ready at once unless that subscription awaits its confirmation. The caller holds
// the lock.
func (w *Waiter) adopt(n *node, tenantID uint64, t *tenantWake) {
	n.subscribed[tenantID] = t
	if n.unconfirmed[tenantID] == 0 {
		close(t.ready)
	}
}

// loop sends n's subscribe and unsubscribe commands, one batch at a time, until the Waiter
// closes.
func (w *Waiter) loop(n *node) {
	defer w.done.Done()
	for {
		select {
		case <-w.ctx.Done():
			if n.ps != nil {
				n.ps.Close()
			}
			return
		case <-n.kick:
			w.update(n)
		}
	}
}

// update brings n's subscriptions in line with the Waiter's tenants: it works out the change
// under the lock and sends it without.
func (w *Waiter) update(n *node) {
	var subIDs []uint64
	var sub, unsub []string
	w.mu.Lock()
	for id, t := range w.tenants {
		if t.node != n {
			continue
		}
		if old, ok := n.subscribed[id]; ok {
			if old != t {
				w.adopt(n, id, t)
			}
			continue
		}
		n.subscribed[id] = t
		n.unconfirmed[id]++
		subIDs, sub = append(subIDs, id), append(sub, WakeChannel(id))
	}
	for id, t := range n.subscribed {
		if w.tenants[id] != t {
			delete(n.subscribed, id)
			unsub = append(unsub, WakeChannel(id))
		}
	}
	w.mu.Unlock()

	ctx, cancel := context.WithTimeout(w.ctx, commandTimeout)
	defer cancel()
	if len(unsub) > 0 && n.ps != nil {
		if err := n.ps.SUnsubscribe(ctx, unsub...); err != nil {
			w.log.Warn("eventqueue: unsubscribe from wake channels failed", "channels", len(unsub), "err", err)
		}
	}
	if len(sub) == 0 {
		return
	}
	start := n.ps == nil
	if start {
		n.ps = w.rdb.SSubscribe(w.ctx) // no channel yet: no command sent
	}
	if err := n.ps.SSubscribe(ctx, sub...); err != nil {
		w.log.Warn("eventqueue: subscribe to wake channels failed", "channels", len(sub), "err", err)
		w.failed(n, subIDs)
		if start {
			n.ps.Close()
			n.ps = nil
		}
		return
	}
	if start {
		w.done.Add(1)
		go w.receive(n, n.ps)
	}
}

// failed drops the entries whose SSUBSCRIBE could not be sent, so their waits poll and the
// next Watch tries again.
func (w *Waiter) failed(n *node, ids []uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, id := range ids {
		t := n.subscribed[id]
		delete(n.subscribed, id)
		if n.unconfirmed[id]--; n.unconfirmed[id] <= 0 {
			delete(n.unconfirmed, id)
		}
		if t != nil && w.tenants[id] == t {
			delete(w.tenants, id)
			close(t.failed)
			close(t.wake)
		}
	}
}

// receive handles one node's subscription: confirmations, publishes, and errors. After an
// error (the connection broke; go-redis reconnects and resubscribes on the next Receive) every
// tenant of the node is woken, since a publish may have been missed.
func (w *Waiter) receive(n *node, ps *redis.PubSub) {
	defer w.done.Done()
	for {
		msg, err := ps.Receive(w.ctx)
		if w.ctx.Err() != nil {
			return
		}
		if err != nil {
			w.broken(n)
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
				w.confirm(n, m.Channel)
			}
		case *redis.Message:
			w.wakeChannel(m.Channel)
		}
	}
}

func tenantOf(channel string) (uint64, bool) {
	s, ok := strings.CutPrefix(channel, keyPrefix)
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

// confirm handles Redis's confirmation of an SSUBSCRIBE on n. Once every SSUBSCRIBE sent for
// the tenant is confirmed, its entry is ready; an entry that was ready already was resubscribed
// after a reconnect, and is woken, since a publish may have been missed meanwhile.
func (w *Waiter) confirm(n *node, channel string) {
	id, ok := tenantOf(channel)
	if !ok {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if c := n.unconfirmed[id]; c > 1 {
		n.unconfirmed[id] = c - 1
		return
	}
	delete(n.unconfirmed, id)
	t := n.subscribed[id]
	if t == nil || w.tenants[id] != t {
		return
	}
	select {
	case <-t.ready:
		t.fire()
	default:
		close(t.ready)
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

// broken wakes every tenant of n after its connection broke, and forgets the confirmations
// it was waiting for: go-redis resubscribes every channel on reconnecting, and those
// confirmations are the ones that count.
func (w *Waiter) broken(n *node) {
	w.mu.Lock()
	defer w.mu.Unlock()
	clear(n.unconfirmed)
	for _, t := range w.tenants {
		if t.node == n {
			t.fire()
		}
	}
}

// fire wakes t's waiters; the caller holds the Waiter's lock.
func (t *tenantWake) fire() {
	close(t.wake)
	t.wake = make(chan struct{})
}

// sweep drops tenants nobody has waited on for Linger; their node's loop unsubscribes them.
func (w *Waiter) sweep() {
	defer w.done.Done()
	tick := time.NewTicker(Linger / 3)
	defer tick.Stop()
	for {
		select {
		case <-w.ctx.Done():
			return
		case <-tick.C:
			w.unsubscribeIdle(w.clock.Now())
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
		t.node.poke()
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
	w.mu.Unlock()
	w.cancel()
	w.done.Wait()
}
