package payments_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v76"

	"github.com/eventq/eventq/internal/clock"
	"github.com/eventq/eventq/internal/payments"
	"github.com/eventq/eventq/internal/psp"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/models"
)

const secret = "whsec_payments"

// fakeQueue is an EventTasks that queues whatever it is given and remembers it; err, when set,
// is returned instead of queueing, and block makes Enqueue wait for its context.
type fakeQueue struct {
	mu     sync.Mutex
	queued map[string]string // event id -> type
	err    error
	block  bool
}

func (q *fakeQueue) Enqueue(ctx context.Context, id, typ string, _ []byte) error {
	if q.block {
		<-ctx.Done()
		return ctx.Err()
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	switch {
	case q.err != nil:
		return q.err
	case q.queued[id] != "":
		return fmt.Errorf("%s: %w", id, payments.ErrAlreadyQueued)
	}
	if q.queued == nil {
		q.queued = map[string]string{}
	}
	q.queued[id] = typ
	return nil
}

// signed is a checkout event of eventType, its payload and a valid signature header.
func signed(eventType stripe.EventType) (id string, payload []byte, header string) {
	id, payload = psp.NewEvent(eventType, "acct_wh", psp.SessionObject{ID: psp.NewID("cs_test")}, time.Now())
	return id, payload, psp.Sign(payload, secret, time.Now())
}

func TestReceive(t *testing.T) {
	e := newEnv(t, true)
	e.Svc.Webhooks = psp.NewVerifier([]string{secret}, clock.Real{})
	dupID, dup, dupSig := signed(stripe.EventTypeCheckoutSessionCompleted)
	cases := []struct {
		name    string
		queue   *fakeQueue
		payload func() (id string, payload []byte, header string)
		outcome payments.Outcome
		inboxed bool
	}{
		{"enqueues a verified event", &fakeQueue{}, func() (string, []byte, string) { return signed(stripe.EventTypeCheckoutSessionCompleted) }, payments.Enqueued, false},
		{"refuses a bad signature", &fakeQueue{}, func() (string, []byte, string) {
			id, b, _ := signed(stripe.EventTypeCheckoutSessionCompleted)
			return id, b, psp.Sign(b, "whsec_other", time.Now())
		}, payments.Refused, false},
		{"ignores an unhandled type", &fakeQueue{}, func() (string, []byte, string) { return signed("checkout.session.expired") }, payments.Ignored, false},
		{"reports a redelivery as a duplicate", &fakeQueue{queued: map[string]string{dupID: string(stripe.EventTypeCheckoutSessionCompleted)}},
			func() (string, []byte, string) { return dupID, dup, dupSig }, payments.Duplicate, false},
		{"saves to the inbox when the enqueue fails", &fakeQueue{err: errors.New("redis down")},
			func() (string, []byte, string) { return signed(stripe.EventTypeCheckoutSessionCompleted) }, payments.Inboxed, true},
		{"saves to the inbox when the enqueue hangs", &fakeQueue{block: true},
			func() (string, []byte, string) { return signed(stripe.EventTypeChargeRefunded) }, payments.Inboxed, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e.Svc.Queue = tc.queue
			id, payload, header := tc.payload()
			start := time.Now()
			r := e.Svc.Receive(context.Background(), payload, header)
			if took := time.Since(start); took > 2*time.Second {
				t.Errorf("Receive took %v", took)
			}
			if r.Outcome != tc.outcome {
				t.Fatalf("outcome %v (%+v), want %v", r.Outcome, r, tc.outcome)
			}
			if tc.outcome != payments.Refused && r.EventID != id {
				t.Errorf("event id %q, want %q", r.EventID, id)
			}
			if (r.Err != nil) != (tc.outcome == payments.Refused || tc.inboxed) {
				t.Errorf("Err %v", r.Err)
			}
			if n := e.Count(t, &models.WebhookInbox{}, "event_id = ?", id); (n == 1) != tc.inboxed || n > 1 {
				t.Errorf("%d inbox rows, want inboxed: %v", n, tc.inboxed)
			}
			if _, queued := tc.queue.queued[id]; queued != (tc.outcome == payments.Enqueued || tc.outcome == payments.Duplicate) {
				t.Errorf("queued %v", queued)
			}
		})
	}

	t.Run("reports lost when the inbox fails too", func(t *testing.T) {
		e := newEnv(t, true)
		e.Svc.Webhooks = psp.NewVerifier([]string{secret}, clock.Real{})
		e.Svc.Queue = &fakeQueue{err: errors.New("redis down")}
		testenv.Must(t, e.DB.Migrator().DropTable(&models.WebhookInbox{}))
		_, payload, header := signed(stripe.EventTypeCheckoutSessionCompleted)
		if r := e.Svc.Receive(context.Background(), payload, header); r.Outcome != payments.Lost || r.Err == nil || r.InboxErr == nil {
			t.Fatalf("receipt %+v, want Lost with both errors", r)
		}
	})
}

func TestDrainInbox(t *testing.T) {
	e := newEnv(t, true)
	var ids []string
	for i := 0; i < 150; i++ { // more than one batch
		id, payload, _ := signed(stripe.EventTypeCheckoutSessionCompleted)
		testenv.Must(t, e.DB.Create(&models.WebhookInbox{EventID: id, Type: string(stripe.EventTypeCheckoutSessionCompleted), Payload: payload}).Error)
		ids = append(ids, id)
	}

	t.Run("a failing queue keeps the inbox", func(t *testing.T) {
		e.Svc.Queue = &fakeQueue{err: errors.New("redis down")}
		if err := e.Svc.DrainInbox(context.Background()); err == nil {
			t.Fatal("DrainInbox succeeded with Redis down")
		}
		if n := e.Count(t, &models.WebhookInbox{}, "1 = 1"); n != 150 {
			t.Errorf("%d inbox rows, want 150", n)
		}
	})
	t.Run("enqueues every event once and empties the inbox", func(t *testing.T) {
		q := &fakeQueue{queued: map[string]string{ids[3]: string(stripe.EventTypeCheckoutSessionCompleted)}} // queued before
		e.Svc.Queue = q
		testenv.Must(t, e.Svc.DrainInbox(context.Background()))
		if n := e.Count(t, &models.WebhookInbox{}, "1 = 1"); n != 0 {
			t.Errorf("%d inbox rows left, want 0", n)
		}
		if len(q.queued) != 150 {
			t.Errorf("%d events queued, want 150", len(q.queued))
		}
	})
}
