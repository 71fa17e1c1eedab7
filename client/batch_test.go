package client

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eventq/eventq/internal/testenv"
)

// ackLog records the bodies of the ack calls that pass a proxy.
type ackLog struct {
	mu     sync.Mutex
	bodies []AckRequest
}

func (l *ackLog) record(r *http.Request) {
	if !strings.HasSuffix(r.URL.Path, "/acks") {
		return
	}
	b, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(b))
	var req AckRequest
	json.Unmarshal(b, &req)
	l.mu.Lock()
	l.bodies = append(l.bodies, req)
	l.mu.Unlock()
}

// ids counts the lease ids and the distinct batch ids the recorded acks carried; an ack
// sent again after a transient error carries the same batch id.
func (l *ackLog) ids() (acks, batches int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	seen := map[string]bool{}
	for _, b := range l.bodies {
		acks += len(b.Acks)
		for _, id := range b.Batches {
			seen[id] = true
		}
	}
	return acks, len(seen)
}

// ConsumeShared acknowledges a batch whose every event was handled with its batch id alone,
// and one with failures with lease ids; against a server without batch acks, or one that
// does not know the batch, it acknowledges with lease ids. Every event is handled once.
func TestConsumeSharedAcksWholeBatches(t *testing.T) {
	e := startAPI(t)
	cases := []struct {
		name string
		// rewrite changes the api's answers: none, no batch_id (an older server), or a batch
		// id the server does not know.
		rewrite     func(w http.ResponseWriter, r *http.Request, forward http.HandlerFunc) bool
		fail        bool // the handler fails each event's first delivery
		wantBatches bool
		wantAcks    bool
	}{
		{name: "every event handled", wantBatches: true},
		{name: "some failed", fail: true, wantBatches: true, wantAcks: true},
		{name: "a server without batch acks", rewrite: rewriteLease(func(m map[string]any) { delete(m, "batch_id") }), wantAcks: true},
		{name: "a batch the server does not know", rewrite: rewriteLease(func(m map[string]any) { m["batch_id"] = "forgotten" }), wantBatches: true, wantAcks: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tn := testenv.MustTenant(t, e.DB, true)
			var log ackLog
			p := newProxy(t, e.Base, func(w http.ResponseWriter, r *http.Request, forward http.HandlerFunc) bool {
				log.record(r)
				return c.rewrite != nil && c.rewrite(w, r, forward)
			})
			ids := e.MustTrack(t, tn, "s", 30)
			// Three batches of ten only if the consumer starts on a full queue.
			testenv.Eventually(t, 10*time.Second, "the events are queued", func() bool { return e.QueueLen(t, tn) == int64(len(ids)) })
			rec := sharedRecorder{}
			if c.fail {
				rec.fail = func(e LeasedEvent) bool { return e.Deliveries == 1 && e.Event.ID == ids[3] }
			}
			cl := New(p.URL, tn.Token, WithBackoff(time.Millisecond, 5*time.Millisecond), WithLongPoll(time.Second))
			stop := runShared(t, func(ctx context.Context) error { return cl.ConsumeShared(ctx, rec.handle, WithLeaseLimit(10)) })
			testenv.Eventually(t, 10*time.Second, "every event is handled and the queue is empty", func() bool {
				return rec.Handled() >= len(ids) && e.QueueLen(t, tn) == 0
			})
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			if rec.Handled() != len(ids) {
				t.Errorf("%d handled for %d events", rec.Handled(), len(ids))
			}
			acks, batches := log.ids()
			if (batches > 0) != c.wantBatches || (acks > 0) != c.wantAcks {
				t.Errorf("the acks carried %d lease ids and %d batch ids", acks, batches)
			}
			if !c.wantAcks && batches != 3 {
				t.Errorf("%d batch ids for 3 batches", batches)
			}
		})
	}
}

// rewriteLease is a proxy hook that passes edit the JSON object of every lease answer.
func rewriteLease(edit func(map[string]any)) func(w http.ResponseWriter, r *http.Request, forward http.HandlerFunc) bool {
	return func(w http.ResponseWriter, r *http.Request, forward http.HandlerFunc) bool {
		if !strings.HasSuffix(r.URL.Path, "/leases") {
			return false
		}
		rec := httptest.NewRecorder()
		forward(rec, r)
		var m map[string]any
		if json.Unmarshal(rec.Body.Bytes(), &m) != nil {
			w.WriteHeader(rec.Code)
			w.Write(rec.Body.Bytes())
			return true
		}
		edit(m)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(rec.Code)
		json.NewEncoder(w).Encode(m)
		return true
	}
}
