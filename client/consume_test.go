package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eventq/eventq/internal/testenv"
)

// recorder is a Consume handler that keeps what it was given.
type recorder struct {
	mu      sync.Mutex
	ids     []string
	batches []int
	// then runs after a batch is recorded, in the handler; its error is the handler's.
	then func(ctx context.Context, n int) error
}

func (r *recorder) handle(ctx context.Context, b Batch) error {
	r.mu.Lock()
	for _, e := range b.Events {
		r.ids = append(r.ids, e.ID)
	}
	r.batches = append(r.batches, b.Count)
	n := len(r.batches)
	r.mu.Unlock()
	if r.then != nil {
		return r.then(ctx, n)
	}
	return nil
}

func (r *recorder) IDs() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.ids)
}

func (r *recorder) Batches() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.batches)
}

// sleeper replaces the Client's waits: it records each duration and waits at most a
// millisecond, so that tests see the waits Consume asks for without spending them.
type sleeper struct {
	mu    sync.Mutex
	waits []time.Duration
}

func (s *sleeper) sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	s.waits = append(s.waits, d)
	s.mu.Unlock()
	return sleepContext(ctx, min(d, time.Millisecond))
}

func (s *sleeper) Waits() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.waits)
}

// fakeTime makes c's waits recorded and instant, and its jitter none (each wait is the full
// back-off step).
func fakeTime(c *Client) *sleeper {
	s := &sleeper{}
	c.sleep = s.sleep
	c.jitter = func(n time.Duration) time.Duration { return n - 1 }
	return s
}

// consume runs c.Consume in the background; the returned function cancels it and returns its
// error, failing the test if it does not return within 5s.
func consume(t *testing.T, c *Client, h func(context.Context, Batch) error) (stop func() error, done <-chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan error, 1)
	go func() { ch <- c.Consume(ctx, h) }()
	t.Cleanup(cancel)
	return func() error {
		t.Helper()
		cancel()
		select {
		case err := <-ch:
			return err
		case <-time.After(5 * time.Second):
			t.Fatal("Consume did not return within 5s of cancel")
			return nil
		}
	}, ch
}

func TestConsume(t *testing.T) {
	e := startAPI(t)

	t.Run("delivers every event once and in order while a producer posts", func(t *testing.T) {
		tn := testenv.MustTenant(t, e.DB, true)
		p := newProxy(t, e.Base, nil)
		c := New(p.URL, tn.Token, WithBackoff(time.Millisecond, 20*time.Millisecond))
		var rec recorder
		stop, _ := consume(t, c, rec.handle)

		posted := make(chan []string, 1)
		go func() { // the producer: 25 posts of 1 to 6 events, with short pauses
			var ids []string
			for i := range 25 {
				events := make([]map[string]any, 1+rand.IntN(6))
				for j := range events {
					events[j] = pageView(fmt.Sprintf("s-%d", i), j)
				}
				got, err := e.Track(tn, events...)
				if err != nil {
					t.Error(err)
					break
				}
				ids = append(ids, got...)
				time.Sleep(time.Duration(rand.IntN(15)) * time.Millisecond)
			}
			posted <- ids
		}()
		want := <-posted
		testenv.Eventually(t, 20*time.Second, "every posted event is handled", func() bool { return len(rec.IDs()) >= len(want) })
		testenv.Eventually(t, 5*time.Second, "the queue is empty", func() bool { return e.QueueLen(t, tn) == 0 })
		// Cancel only once the consumer reads again: its last trim has then been answered. A
		// cancel while that answer is on its way makes Consume send the trim once more (a
		// harmless repeat with the same offset), which would break the count below.
		testenv.Eventually(t, 5*time.Second, "the consumer reads again after its last trim", func() bool {
			reqs := p.Requests()
			return len(reqs) > 0 && strings.HasPrefix(reqs[len(reqs)-1], "GET")
		})
		if err := stop(); err != nil {
			t.Fatalf("Consume returned %v after cancel, want nil", err)
		}

		if got := rec.IDs(); !slices.Equal(got, want) {
			t.Fatalf("handled %d events %v\nwant %d in order %v", len(got), got, len(want), want)
		}
		var trims []int
		for _, r := range p.Requests() {
			var n int
			if _, err := fmt.Sscanf(r, "DELETE count=%d", &n); err == nil {
				trims = append(trims, n)
			}
		}
		if batches := rec.Batches(); !slices.Equal(trims, batches) || len(batches) < 2 {
			t.Fatalf("trims %v, batches %v: want one trim of each batch's count, several batches", trims, batches)
		}
		if e.QueueLen(t, tn) != 0 {
			t.Fatalf("queue length %d after Consume", e.QueueLen(t, tn))
		}
	})

	t.Run("keeps events tracked between its read and its trim", func(t *testing.T) {
		tn := testenv.MustTenant(t, e.DB, true)
		first := e.MustTrack(t, tn, "s-1", 3)
		var later []string
		rec := recorder{then: func(_ context.Context, n int) error {
			if n == 1 { // the batch is read but not trimmed yet
				var err error
				if later, err = e.Track(tn, pageView("s-2", 0), pageView("s-2", 1)); err != nil {
					t.Error(err)
				}
			}
			return nil
		}}
		c := New(e.Base, tn.Token, WithBackoff(time.Millisecond, 5*time.Millisecond))
		stop, _ := consume(t, c, rec.handle)
		testenv.Eventually(t, 10*time.Second, "both batches are handled", func() bool { return len(rec.Batches()) == 2 })
		testenv.Eventually(t, 5*time.Second, "the queue is empty", func() bool { return e.QueueLen(t, tn) == 0 })
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if got := rec.Batches(); !slices.Equal(got, []int{3, 2}) || !slices.Equal(rec.IDs(), append(first, later...)) {
			t.Fatalf("batches %v ids %v", got, rec.IDs())
		}
	})

	t.Run("returns the handler's error and trims nothing", func(t *testing.T) {
		tn := testenv.MustTenant(t, e.DB, true)
		e.MustTrack(t, tn, "s-1", 3)
		p := newProxy(t, e.Base, nil)
		boom := errors.New("boom")
		calls := 0
		err := New(p.URL, tn.Token).Consume(context.Background(), func(context.Context, Batch) error {
			calls++
			return boom
		})
		if !errors.Is(err, boom) || calls != 1 {
			t.Fatalf("Consume = %v after %d calls, want boom after 1", err, calls)
		}
		if n := e.QueueLen(t, tn); n != 3 || p.Count("DELETE") != 0 {
			t.Fatalf("queue length %d, requests %v: want 3 and no DELETE", n, p.Requests())
		}
	})

	t.Run("stops at once when cancelled while the queue is empty", func(t *testing.T) {
		tn := testenv.MustTenant(t, e.DB, true)
		p := newProxy(t, e.Base, nil)
		c := New(p.URL, tn.Token, WithBackoff(5*time.Second, 10*time.Second)) // real, long waits
		stop, _ := consume(t, c, func(context.Context, Batch) error { t.Error("handler called"); return nil })
		testenv.Eventually(t, 5*time.Second, "Consume has read the empty queue", func() bool { return p.Count("GET") >= 1 })
		start := time.Now()
		if err := stop(); err != nil {
			t.Fatalf("Consume = %v, want nil", err)
		}
		if d := time.Since(start); d > time.Second {
			t.Fatalf("Consume took %v to return after cancel", d)
		}
	})

	t.Run("a bad token stops it with a 401 and no retry", func(t *testing.T) {
		c := New(e.Base, "999999|wrong")
		s := fakeTime(c)
		start := time.Now()
		err := c.Consume(context.Background(), func(context.Context, Batch) error { return nil })
		ae, ok := errors.AsType[*APIError](err)
		if !ok || ae.Status != 401 || ae.Message != "Unauthenticated." {
			t.Fatalf("Consume = %v, want an *APIError 401 Unauthenticated.", err)
		}
		if d := time.Since(start); d > 2*time.Second || len(s.Waits()) != 0 {
			t.Fatalf("took %v with waits %v", d, s.Waits())
		}
	})

	t.Run("a trim refused for lack of ability is returned and the batch stays", func(t *testing.T) {
		tn := testenv.MustTenant(t, e.DB, true, "events:read")
		e.MustTrack(t, tn, "s-1", 2)
		c := New(e.Base, tn.Token)
		s := fakeTime(c)
		var rec recorder
		err := c.Consume(context.Background(), rec.handle)
		if ae, ok := errors.AsType[*APIError](err); !ok || ae.Status != 403 {
			t.Fatalf("Consume = %v, want 403", err)
		}
		if e.QueueLen(t, tn) != 2 || len(s.Waits()) != 0 || !slices.Equal(rec.Batches(), []int{2}) {
			t.Fatalf("queue %d, waits %v, batches %v", e.QueueLen(t, tn), s.Waits(), rec.Batches())
		}
	})

	t.Run("trims a finished batch even when cancelled during the handler", func(t *testing.T) {
		tn := testenv.MustTenant(t, e.DB, true)
		e.MustTrack(t, tn, "s-1", 2)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		err := New(e.Base, tn.Token).Consume(ctx, func(context.Context, Batch) error {
			cancel() // shutdown requested while the batch was processed to the end
			return nil
		})
		if err != nil || e.QueueLen(t, tn) != 0 {
			t.Fatalf("Consume = %v, queue length %d; want nil and 0", err, e.QueueLen(t, tn))
		}
	})
}

// Against a server without offsets and long polling (an older eventq), Consume backs off on an
// empty queue and never repeats a trim the server may have applied.
func TestConsumeRetries(t *testing.T) {
	e := startAPI(t)
	ms := time.Millisecond

	// run consumes tn through a proxy with hook until want events are handled, the queue is
	// empty and at least minWaits waits were asked for, and returns the handler's batches and
	// the waits.
	run := func(t *testing.T, tn tenant, p *proxy, want, minWaits int) (*recorder, []time.Duration) {
		t.Helper()
		c := New(p.URL, tn.Token)
		s := fakeTime(c)
		rec := &recorder{}
		stop, done := consume(t, c, rec.handle)
		testenv.Eventually(t, 10*time.Second, "the events are handled and trimmed", func() bool {
			select {
			case err := <-done:
				t.Fatalf("Consume returned early: %v", err)
			default:
			}
			return len(rec.IDs()) >= want && e.QueueLen(t, tn) == 0 && len(s.Waits()) >= minWaits
		})
		if err := stop(); err != nil {
			t.Fatalf("Consume = %v", err)
		}
		return rec, s.Waits()
	}

	t.Run("recovers from 503s on read with growing waits", func(t *testing.T) {
		tn := testenv.MustTenant(t, e.DB, true)
		ids := e.MustTrack(t, tn, "s-1", 3)
		var failed atomic.Int32
		p := newLegacyProxy(t, e.Base, func(w http.ResponseWriter, r *http.Request, _ http.HandlerFunc) bool {
			if r.Method == "GET" && failed.Add(1) <= 2 {
				answer(w, 503, "Server Error.")
				return true
			}
			return false
		})
		rec, waits := run(t, tn, p, 3, 3) // two errors, then the idle wait after the batch
		if !slices.Equal(rec.IDs(), ids) || !slices.Equal(rec.Batches(), []int{3}) {
			t.Fatalf("handled %v in batches %v", rec.IDs(), rec.Batches())
		}
		if len(waits) < 3 || waits[0] != 200*ms || waits[1] != 400*ms || waits[2] != 200*ms {
			t.Fatalf("waits %v: want 200ms, 400ms for the errors, then 200ms again (reset by the batch)", waits)
		}
	})

	t.Run("waits as long as a 429's Retry-After", func(t *testing.T) {
		tn := testenv.MustTenant(t, e.DB, true)
		e.MustTrack(t, tn, "s-1", 2)
		var limited atomic.Bool
		p := newLegacyProxy(t, e.Base, func(w http.ResponseWriter, r *http.Request, _ http.HandlerFunc) bool {
			if !limited.Swap(true) {
				answer(w, 429, "Too Many Attempts.", "Retry-After", "7")
				return true
			}
			return false
		})
		_, waits := run(t, tn, p, 2, 1)
		if len(waits) == 0 || waits[0] != 7*time.Second {
			t.Fatalf("waits %v: want 7s first", waits)
		}
	})

	t.Run("retries a trim the server did not apply", func(t *testing.T) {
		tn := testenv.MustTenant(t, e.DB, true)
		e.MustTrack(t, tn, "s-1", 3)
		var failed atomic.Bool
		p := newLegacyProxy(t, e.Base, func(w http.ResponseWriter, r *http.Request, _ http.HandlerFunc) bool {
			if r.Method == "DELETE" && !failed.Swap(true) {
				answer(w, 503, "Server Error.")
				return true
			}
			return false
		})
		rec, _ := run(t, tn, p, 3, 0)
		if got := p.Requests()[:4]; !slices.Equal(got, []string{"GET", "DELETE count=3", "GET", "DELETE count=3"}) {
			t.Fatalf("requests %v: want the trim retried after a read that finds the batch still there", p.Requests())
		}
		if !slices.Equal(rec.Batches(), []int{3}) {
			t.Fatalf("batches %v: the batch was delivered again", rec.Batches())
		}
	})

	for name, lose := range map[string]func(w http.ResponseWriter){
		"an error status": func(w http.ResponseWriter) { answer(w, 504, "Gateway Timeout") },
		"a dropped connection": func(w http.ResponseWriter) {
			conn, _, _ := w.(http.Hijacker).Hijack()
			conn.Close()
		},
	} {
		t.Run("does not repeat an applied trim whose answer was lost to "+name, func(t *testing.T) {
			tn := testenv.MustTenant(t, e.DB, true)
			first := e.MustTrack(t, tn, "s-1", 3)
			var lost atomic.Bool
			var later atomic.Pointer[[]string]
			p := newLegacyProxy(t, e.Base, func(w http.ResponseWriter, r *http.Request, forward http.HandlerFunc) bool {
				if r.Method != "DELETE" || lost.Swap(true) {
					return false
				}
				ids, err := e.Track(tn, pageView("s-2", 0), pageView("s-2", 1)) // behind the batch, before the trim
				if err != nil {
					t.Error(err)
				}
				later.Store(&ids)
				rec := httptest.NewRecorder()
				forward(rec, r) // the api trims the batch ...
				if rec.Code != 204 {
					t.Errorf("forwarded trim: %d", rec.Code)
				}
				lose(w) // ... but the client never learns it
				return true
			})
			rec, _ := run(t, tn, p, 5, 0)
			if got, want := rec.IDs(), append(first, *later.Load()...); !slices.Equal(got, want) {
				t.Fatalf("handled %v, want %v", got, want)
			}
			if p.Count("DELETE count=3") != 1 {
				t.Fatalf("requests %v: the applied trim was sent again", p.Requests())
			}
		})
	}
}

// Against this server Consume long-polls: an event tracked while it waits is handled without
// any back-off; and a trim whose answer was lost is simply sent again with its offset,
// removing nothing more.
func TestConsumeWithOffsetsAndLongPolling(t *testing.T) {
	e := startAPI(t)

	t.Run("an event tracked while the read waits is handled without back-off", func(t *testing.T) {
		tn := testenv.MustTenant(t, e.DB, true)
		p := newProxy(t, e.Base, nil)
		c := New(p.URL, tn.Token)
		s := fakeTime(c)
		rec := &recorder{}
		stop, _ := consume(t, c, rec.handle)
		testenv.Eventually(t, 5*time.Second, "the first read waits", func() bool { return p.Count("GET wait=20") >= 1 })
		ids := e.MustTrack(t, tn, "s-1", 2)
		testenv.Eventually(t, 5*time.Second, "the events are handled", func() bool { return len(rec.IDs()) == 2 })
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(rec.IDs(), ids) || len(s.Waits()) != 0 {
			t.Fatalf("handled %v, waits %v: want the events and no back-off", rec.IDs(), s.Waits())
		}
	})

	t.Run("a trim whose answer was lost is repeated with its offset and removes nothing more", func(t *testing.T) {
		tn := testenv.MustTenant(t, e.DB, true)
		first := e.MustTrack(t, tn, "s-1", 3)
		var lost atomic.Bool
		var later atomic.Pointer[[]string]
		p := newProxy(t, e.Base, func(w http.ResponseWriter, r *http.Request, forward http.HandlerFunc) bool {
			if r.Method != "DELETE" || lost.Swap(true) {
				return false
			}
			ids, err := e.Track(tn, pageView("s-2", 0), pageView("s-2", 1)) // behind the batch
			if err != nil {
				t.Error(err)
			}
			later.Store(&ids)
			forward(httptest.NewRecorder(), r) // applied ...
			conn, _, _ := w.(http.Hijacker).Hijack()
			conn.Close() // ... but the answer is lost
			return true
		})
		c := New(p.URL, tn.Token)
		fakeTime(c)
		rec := &recorder{}
		stop, _ := consume(t, c, rec.handle)
		testenv.Eventually(t, 10*time.Second, "every event is handled and trimmed", func() bool {
			return len(rec.IDs()) >= 5 && e.QueueLen(t, tn) == 0
		})
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if got, want := rec.IDs(), append(first, *later.Load()...); !slices.Equal(got, want) {
			t.Fatalf("handled %v, want %v", got, want)
		}
		if p.Count("DELETE count=3&offset=0") != 2 || p.Count("GET wait=20") == 0 {
			t.Fatalf("requests %v: want the offset trim sent twice", p.Requests())
		}
	})
}
