package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/eventq/eventq/internal/testenv"
)

// sharedRecorder is a ConsumeShared handler that keeps every delivery it was given.
type sharedRecorder struct {
	mu         sync.Mutex
	deliveries map[string][]int // event id -> Deliveries of each delivery, in order
	handled    int
	// fail, when set, decides whether the handler fails this delivery.
	fail func(e LeasedEvent) bool
}

func (r *sharedRecorder) handle(_ context.Context, e LeasedEvent) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.deliveries == nil {
		r.deliveries = map[string][]int{}
	}
	r.deliveries[e.Event.ID] = append(r.deliveries[e.Event.ID], e.Deliveries)
	if r.fail != nil && r.fail(e) {
		return errors.New("handler failed on purpose")
	}
	r.handled++
	return nil
}

func (r *sharedRecorder) Handled() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.handled
}

func (r *sharedRecorder) Deliveries(id string) []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.deliveries[id])
}

// runShared runs loop (a ConsumeShared call) in the background; stop cancels it and returns
// its error, failing the test if it does not return within 5s.
func runShared(t *testing.T, loop func(ctx context.Context) error) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan error, 1)
	go func() { ch <- loop(ctx) }()
	t.Cleanup(cancel)
	return func() error {
		t.Helper()
		cancel()
		select {
		case err := <-ch:
			return err
		case <-time.After(5 * time.Second):
			t.Fatal("ConsumeShared did not return within 5s of cancel")
			return nil
		}
	}
}

func statusesOf(res []AckResult) []AckStatus {
	out := make([]AckStatus, len(res))
	for i, r := range res {
		out[i] = r.Status
	}
	return out
}

func TestLeaseAndAck(t *testing.T) {
	e := startAPI(t)
	ctx := context.Background()

	t.Run("leases disjoint batches and answers the contract's statuses", func(t *testing.T) {
		tn := testenv.MustTenant(t, e.DB, true)
		ids := e.MustTrack(t, tn, "s-1", 3)
		c := New(e.Base, tn.Token)
		a, err := c.Lease(ctx, 2, 30*time.Second, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(a.Events) != 2 || a.Events[0].Event.ID != ids[0] || a.Events[1].Event.ID != ids[1] ||
			a.Events[0].Offset != 0 || a.Events[1].Offset != 1 || a.Events[0].Deliveries != 1 || time.Until(a.ExpiresAt) < 25*time.Second {
			t.Fatalf("first lease: %+v", a)
		}
		b, err := c.Lease(ctx, 10, time.Second, 0)
		if err != nil || len(b.Events) != 1 || b.Events[0].Event.ID != ids[2] {
			t.Fatalf("second lease: %+v %v, want only the third event", b, err)
		}
		res, err := c.Ack(ctx, AckRequest{Acks: []string{a.Events[0].LeaseID}, Retries: []string{a.Events[1].LeaseID}, Extends: []string{a.Events[1].LeaseID, "nonsense"}})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := statusesOf(res), []AckStatus{StatusAcked, StatusRetried, StatusExpired, StatusUnknown}; !slices.Equal(got, want) {
			t.Fatalf("statuses %v, want %v", got, want)
		}
		res, err = c.Ack(ctx, AckRequest{Acks: []string{a.Events[0].LeaseID}})
		if err != nil || !slices.Equal(statusesOf(res), []AckStatus{StatusAlreadyAcked}) {
			t.Fatalf("repeated ack: %v %v", res, err)
		}
		if n := e.QueueLen(t, tn); n != 2 {
			t.Errorf("queue length %d, want 2 (the acknowledged front event trimmed)", n)
		}
		again, err := c.Lease(ctx, 10, 30*time.Second, 0)
		if err != nil || len(again.Events) != 1 || again.Events[0].Event.ID != ids[1] || again.Events[0].Deliveries != 2 {
			t.Fatalf("lease after retry: %+v %v, want the retried event with deliveries 2", again, err)
		}
	})

	t.Run("rejects out-of-range arguments without a request", func(t *testing.T) {
		c := New("http://127.0.0.1:1", "1|x")
		if _, err := c.Lease(ctx, 0, time.Second, 0); err == nil {
			t.Error("Lease limit 0: no error")
		}
		if _, err := c.Lease(ctx, MaxLeaseLimit+1, time.Second, 0); err == nil {
			t.Error("Lease limit 1001: no error")
		}
		if _, err := c.Ack(ctx, AckRequest{Acks: make([]string, MaxAckIDs+1)}); err == nil {
			t.Error("Ack of 1001 ids: no error")
		}
		if err := c.DropDeadLetters(ctx, 0); err == nil {
			t.Error("DropDeadLetters 0: no error")
		}
	})
}

func TestConsumeShared(t *testing.T) {
	e := startAPI(t, "EVENTQUEUE_MAX_DELIVERIES=3")
	ctx := context.Background()

	t.Run("concurrent consumers on two api processes process every event exactly once", func(t *testing.T) {
		tn := testenv.MustTenant(t, e.DB, true)
		bases := []string{e.Base, e.Another(t)}
		var rec sharedRecorder
		var stops []func() error
		for i := range 4 {
			c := New(bases[i%2], tn.Token, WithBackoff(time.Millisecond, 20*time.Millisecond))
			stops = append(stops, runShared(t, func(ctx context.Context) error {
				return c.ConsumeShared(ctx, rec.handle, WithLeaseLimit(7))
			}))
		}
		var ids []string
		for i := range 20 {
			ids = append(ids, e.MustTrack(t, tn, fmt.Sprintf("s-%d", i), 10)...)
			time.Sleep(5 * time.Millisecond)
		}
		testenv.Eventually(t, 20*time.Second, "every event is handled and the queue is empty", func() bool {
			return rec.Handled() >= len(ids) && e.QueueLen(t, tn) == 0
		})
		for _, stop := range stops {
			if err := stop(); err != nil {
				t.Fatalf("ConsumeShared: %v", err)
			}
		}
		if rec.Handled() != len(ids) {
			t.Errorf("%d deliveries for %d events", rec.Handled(), len(ids))
		}
		for _, id := range ids {
			if d := rec.Deliveries(id); !slices.Equal(d, []int{1}) {
				t.Errorf("event %s: deliveries %v, want [1]", id, d)
			}
		}
	})

	t.Run("a slow handler keeps its lease past the visibility", func(t *testing.T) {
		tn := testenv.MustTenant(t, e.DB, true)
		ids := e.MustTrack(t, tn, "s-1", 2)
		started := make(chan struct{})
		var got []LeasedEvent
		c := New(e.Base, tn.Token, WithLongPoll(time.Second))
		stop := runShared(t, func(ctx context.Context) error {
			return c.ConsumeSharedBatch(ctx, func(ctx context.Context, events []LeasedEvent) error {
				got = append(got, events...)
				if len(got) == len(events) {
					close(started)
					time.Sleep(2500 * time.Millisecond) // 2.5 × the visibility
				}
				return nil
			}, WithVisibility(time.Second))
		})
		<-started
		other := New(e.Base, tn.Token)
		for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			l, err := other.Lease(ctx, 10, time.Second, 0)
			if err != nil || len(l.Events) != 0 {
				t.Fatalf("another consumer leased %+v (%v) while the slow handler ran", l.Events, err)
			}
		}
		testenv.Eventually(t, 5*time.Second, "the batch is acknowledged", func() bool { return e.QueueLen(t, tn) == 0 })
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 || got[0].Event.ID != ids[0] || got[1].Event.ID != ids[1] || got[0].Deliveries != 1 {
			t.Fatalf("handled %+v", got)
		}
	})

	t.Run("a failed event comes back with deliveries counted, then goes to the dead letters", func(t *testing.T) {
		tn := testenv.MustTenant(t, e.DB, true)
		ids := e.MustTrack(t, tn, "s-1", 2)
		bad := ids[0]
		rec := sharedRecorder{fail: func(e LeasedEvent) bool { return e.Event.ID == bad }}
		c := New(e.Base, tn.Token, WithBackoff(time.Millisecond, 5*time.Millisecond), WithLongPoll(time.Second))
		stop := runShared(t, func(ctx context.Context) error { return c.ConsumeShared(ctx, rec.handle) })
		var dead []DeadLetter
		testenv.Eventually(t, 15*time.Second, "the failing event is a dead letter", func() bool {
			var err error
			dead, err = c.DeadLetters(ctx, 10)
			return err == nil && len(dead) == 1 && e.QueueLen(t, tn) == 0
		})
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if d := rec.Deliveries(bad); !slices.Equal(d, []int{1, 2, 3}) {
			t.Errorf("failing event: deliveries %v, want [1 2 3] (EVENTQUEUE_MAX_DELIVERIES=3)", d)
		}
		if d := rec.Deliveries(ids[1]); !slices.Equal(d, []int{1}) {
			t.Errorf("good event: deliveries %v, want [1]", d)
		}
		if dead[0].Event.ID != bad || dead[0].Deliveries != 3 || dead[0].Offset != 0 {
			t.Errorf("dead letter %+v, want the failing event at offset 0 with 3 deliveries", dead[0])
		}
		if err := c.DropDeadLetters(ctx, 1); err != nil {
			t.Fatal(err)
		}
		if dead, err := c.DeadLetters(ctx, 10); err != nil || len(dead) != 0 {
			t.Errorf("after the drop: %+v %v", dead, err)
		}
	})

	t.Run("a failure with a back-off of a second or more stays invisible that long", func(t *testing.T) {
		tn := testenv.MustTenant(t, e.DB, true)
		ids := e.MustTrack(t, tn, "s-1", 1)
		var mu sync.Mutex
		var at []time.Time
		rec := sharedRecorder{fail: func(e LeasedEvent) bool {
			mu.Lock()
			defer mu.Unlock()
			at = append(at, time.Now())
			return e.Deliveries == 1
		}}
		c := New(e.Base, tn.Token, WithBackoff(1500*time.Millisecond, 3*time.Second), WithLongPoll(5*time.Second))
		stop := runShared(t, func(ctx context.Context) error { return c.ConsumeShared(ctx, rec.handle) })
		testenv.Eventually(t, 10*time.Second, "the event succeeds on its second delivery", func() bool {
			return rec.Handled() == 1 && e.QueueLen(t, tn) == 0
		})
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		if d := rec.Deliveries(ids[0]); !slices.Equal(d, []int{1, 2}) || len(at) != 2 {
			t.Fatalf("deliveries %v", d)
		}
		if gap := at[1].Sub(at[0]); gap < 1900*time.Millisecond {
			t.Errorf("redelivered after %v, want about 2s (1.5s rounded up to whole seconds)", gap)
		}
	})

	t.Run("a consumer that dies mid-batch loses nothing", func(t *testing.T) {
		tn := testenv.MustTenant(t, e.DB, true)
		ids := e.MustTrack(t, tn, "s-1", 5)
		dying := New(e.Base, tn.Token)
		if l, err := dying.Lease(ctx, 3, time.Second, 0); err != nil || len(l.Events) != 3 {
			t.Fatalf("lease: %+v %v", l, err)
		} // … and it never acknowledges them
		var rec sharedRecorder
		c := New(e.Base, tn.Token, WithLongPoll(2*time.Second))
		stop := runShared(t, func(ctx context.Context) error { return c.ConsumeShared(ctx, rec.handle) })
		testenv.Eventually(t, 10*time.Second, "every event is handled", func() bool {
			return rec.Handled() == 5 && e.QueueLen(t, tn) == 0
		})
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		for i, id := range ids {
			want := []int{1}
			if i < 3 {
				want = []int{2}
			}
			if d := rec.Deliveries(id); !slices.Equal(d, want) {
				t.Errorf("event %d: deliveries %v, want %v", i, d, want)
			}
		}
	})

	t.Run("a cancel mid-batch acks what was handled and hands the rest back at once", func(t *testing.T) {
		tn := testenv.MustTenant(t, e.DB, true)
		ids := e.MustTrack(t, tn, "s-1", 5)
		blocked := make(chan struct{})
		n := 0
		c := New(e.Base, tn.Token)
		stop := runShared(t, func(ctx context.Context) error {
			return c.ConsumeShared(ctx, func(ctx context.Context, e LeasedEvent) error {
				if n++; n == 2 {
					close(blocked)
					<-ctx.Done()
					return ctx.Err()
				}
				return nil
			}, WithVisibility(time.Minute))
		})
		<-blocked
		if err := stop(); err != nil {
			t.Fatalf("ConsumeShared after cancel: %v", err)
		}
		if n != 2 {
			t.Errorf("the handler ran %d times, want 2 (none after the cancel)", n)
		}
		if l := e.QueueLen(t, tn); l != 4 {
			t.Errorf("queue length %d, want 4 (the first event acknowledged)", l)
		}
		l, err := New(e.Base, tn.Token).Lease(ctx, 10, time.Second, 0)
		if err != nil || len(l.Events) != 4 {
			t.Fatalf("lease after the stop: %+v %v, want the 4 events handed back (not left for a minute)", l, err)
		}
		for i, le := range l.Events {
			if le.Event.ID != ids[i+1] || le.Deliveries != 2 {
				t.Errorf("event %d: %s with deliveries %d, want %s with 2", i, le.Event.ID, le.Deliveries, ids[i+1])
			}
		}
	})

	t.Run("honours Retry-After on a lease and a permanent error ends the loop", func(t *testing.T) {
		tn := testenv.MustTenant(t, e.DB, true)
		e.MustTrack(t, tn, "s-1", 1)
		var once sync.Once
		p := newProxy(t, e.Base, nil)
		p.hook = func(w http.ResponseWriter, r *http.Request, _ http.HandlerFunc) bool {
			answered := false
			once.Do(func() { answer(w, 503, "Service Unavailable.", "Retry-After", "2"); answered = true })
			return answered
		}
		c := New(p.URL, tn.Token, WithLongPoll(time.Second))
		s := fakeTime(c)
		var rec sharedRecorder
		stop := runShared(t, func(ctx context.Context) error { return c.ConsumeShared(ctx, rec.handle) })
		testenv.Eventually(t, 5*time.Second, "the event is handled", func() bool { return rec.Handled() == 1 && e.QueueLen(t, tn) == 0 })
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if w := s.Waits(); len(w) == 0 || w[0] != 2*time.Second {
			t.Errorf("waits %v, want 2s first (Retry-After)", w)
		}
		bad := New(e.Base, "999999|wrong")
		err := bad.ConsumeShared(ctx, rec.handle)
		if ae, ok := errors.AsType[*APIError](err); !ok || ae.Status != 401 {
			t.Errorf("bad token: %v, want the 401", err)
		}
	})
}
