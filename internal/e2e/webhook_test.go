package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eventq/eventq/internal/eventqueue/queuetest"

	"github.com/stripe/stripe-go/v76"

	"github.com/eventq/eventq/internal/psp"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/models"
)

func TestWebhookFulfilsAPaidCheckoutOnce(t *testing.T) {
	s := startStack(t)
	sh := s.MustShop(t, "acct_shop1", true)
	cs := s.PaidSession(sh, "acct_shop1")
	id, payload := psp.NewEvent(stripe.EventTypeCheckoutSessionCompleted, "acct_shop1", cs, time.Now())

	if took := s.MustDeliver(t, payload); took > time.Second {
		t.Fatalf("webhook took %s", took)
	}
	testenv.Eventually(t, 20*time.Second, "the purchase is committed", func() bool {
		return s.Count(t, &models.Purchase{}, "psp_checkout_session_id = ?", cs.ID) == 1
	})
	testenv.Eventually(t, 20*time.Second, "the task completes", func() bool { return s.TaskState(id) == "completed" })

	var p models.Purchase
	testenv.Must(t, s.DB.Take(&p, "psp_checkout_session_id = ?", cs.ID).Error)
	if p.TenantID != sh.Tenant.ID || p.AudienceMemberID != sh.Member.ID || p.ProductID != sh.Product.ID ||
		p.AmountTotal != 1999 || p.Currency != "usd" || !strings.HasPrefix(p.PSPPaymentIntentID, "pi_") {
		t.Fatalf("purchase %+v", p)
	}
	if n := s.Count(t, &models.Entitlement{}, "purchase_id = ? AND audience_member_id = ? AND product_id = ?", p.ID, sh.Member.ID, sh.Product.ID); n != 1 {
		t.Fatalf("%d entitlements", n)
	}
	events, err := queuetest.Read(context.Background(), s.Queue, sh.Tenant.ID)
	testenv.Must(t, err)
	if len(events) != 1 {
		t.Fatalf("queue holds %d events, want the purchase_completed event", len(events))
	}
	var ev models.QueueEvent
	testenv.Must(t, json.Unmarshal([]byte(events[0]), &ev))
	if ev.Type != "purchase_completed" || ev.AudienceMemberID == nil || *ev.AudienceMemberID != models.FormatID(sh.Member.ID) {
		t.Fatalf("queued event %+v", ev)
	}

	t.Run("a redelivery of the same event is dropped", func(t *testing.T) {
		s.MustDeliver(t, payload)
		if state := s.TaskState(id); state != "completed" {
			t.Fatalf("task state %s", state)
		}
		if n := s.Count(t, &models.Purchase{}, "1 = 1"); n != 1 {
			t.Fatalf("%d purchases", n)
		}
	})
}

// Every refused delivery is answered 200 and leaves nothing behind: no task, no purchase.
func TestWebhookRefusalsAre200AndFulfilNothing(t *testing.T) {
	s := startStack(t)
	sh := s.MustShop(t, "acct_shop1", true)
	other := s.MustShop(t, "acct_other", true)

	type delivery struct {
		name    string
		payload func() (string, []byte, string) // event id, body, signature header
		queued  bool                            // verified and enqueued, then refused by the worker
	}
	event := func(typ stripe.EventType, account string, cs psp.SessionObject) (string, []byte) {
		return psp.NewEvent(typ, account, cs, time.Now())
	}
	for _, d := range []delivery{
		{"bad signature", func() (string, []byte, string) {
			id, b := event(stripe.EventTypeCheckoutSessionCompleted, "acct_shop1", s.PaidSession(sh, "acct_shop1"))
			return id, b, psp.Sign(b, "whsec_wrong", time.Now())
		}, false},
		{"tampered body", func() (string, []byte, string) {
			id, b := event(stripe.EventTypeCheckoutSessionCompleted, "acct_shop1", s.PaidSession(sh, "acct_shop1"))
			h := psp.Sign(b, webhookSecret, time.Now())
			return id, bytes.Replace(b, []byte(`"amount_total":1999`), []byte(`"amount_total":1`), 1), h
		}, false},
		{"stale timestamp", func() (string, []byte, string) {
			id, b := event(stripe.EventTypeCheckoutSessionCompleted, "acct_shop1", s.PaidSession(sh, "acct_shop1"))
			return id, b, psp.Sign(b, webhookSecret, time.Now().Add(-6*time.Minute))
		}, false},
		{"missing header", func() (string, []byte, string) {
			id, b := event(stripe.EventTypeCheckoutSessionCompleted, "acct_shop1", s.PaidSession(sh, "acct_shop1"))
			return id, b, ""
		}, false},
		{"garbage header", func() (string, []byte, string) {
			id, b := event(stripe.EventTypeCheckoutSessionCompleted, "acct_shop1", s.PaidSession(sh, "acct_shop1"))
			return id, b, "nonsense"
		}, false},
		{"other event type", func() (string, []byte, string) {
			id, b := event("checkout.session.expired", "acct_shop1", s.PaidSession(sh, "acct_shop1"))
			return id, b, psp.Sign(b, webhookSecret, time.Now())
		}, false},
		{"malformed JSON", func() (string, []byte, string) {
			b := []byte(`{"id":"evt_x","type":"checkout.session.completed",`)
			return "evt_x", b, psp.Sign(b, webhookSecret, time.Now())
		}, false},
		{"unknown tenant", func() (string, []byte, string) {
			cs := s.PaidSession(sh, "acct_shop1")
			cs.Metadata = map[string]string{"tenant_id": "999999", "audience_member_id": "1", "product_id": "1"}
			id, b := event(stripe.EventTypeCheckoutSessionCompleted, "acct_shop1", cs)
			return id, b, psp.Sign(b, webhookSecret, time.Now())
		}, true},
		{"foreign connected account", func() (string, []byte, string) {
			// acct_other completes a session whose metadata names shop1: must not grant in shop1.
			id, b := event(stripe.EventTypeCheckoutSessionCompleted, "acct_other", s.PaidSession(sh, "acct_other"))
			return id, b, psp.Sign(b, webhookSecret, time.Now())
		}, true},
		{"platform account for a connected tenant", func() (string, []byte, string) {
			id, b := event(stripe.EventTypeCheckoutSessionCompleted, "", s.PaidSession(sh, ""))
			return id, b, psp.Sign(b, webhookSecret, time.Now())
		}, true},
		{"member of another tenant", func() (string, []byte, string) {
			cs := s.PaidSession(sh, "acct_shop1")
			cs.Metadata["audience_member_id"] = models.FormatID(other.Member.ID)
			id, b := event(stripe.EventTypeCheckoutSessionCompleted, "acct_shop1", cs)
			return id, b, psp.Sign(b, webhookSecret, time.Now())
		}, true},
	} {
		t.Run("200 and nothing fulfilled for "+d.name, func(t *testing.T) {
			id, body, header := d.payload()
			if status, _ := s.Post(t, body, header); status != 200 {
				t.Fatalf("status %d", status)
			}
			if d.queued {
				testenv.Eventually(t, 20*time.Second, "the worker refuses the task without retry", func() bool {
					return s.TaskState(id) == "archived"
				})
			} else if state := s.TaskState(id); state != "none" {
				t.Fatalf("a refused delivery was enqueued (%s)", state)
			}
			if n := s.Count(t, &models.Purchase{}, "1 = 1"); n != 0 {
				t.Fatalf("%d purchases", n)
			}
			if n := s.Count(t, &models.Entitlement{}, "1 = 1"); n != 0 {
				t.Fatalf("%d entitlements", n)
			}
			if n := s.Count(t, &models.WebhookInbox{}, "1 = 1"); n != 0 {
				t.Fatalf("%d inbox rows", n)
			}
		})
	}
}

// Eight concurrent deliveries of one event, plus redeliveries of the same session under new
// event ids (as the provider does for async_payment_succeeded, or a replay), make one purchase.
func TestConcurrentDuplicateDeliveriesMakeOnePurchase(t *testing.T) {
	s := startStack(t)
	sh := s.MustShop(t, "acct_shop1", true)
	cs := s.PaidSession(sh, "acct_shop1")
	id, payload := psp.NewEvent(stripe.EventTypeCheckoutSessionCompleted, "acct_shop1", cs, time.Now())
	var others [][]byte
	var otherIDs []string
	for i := 0; i < 4; i++ {
		typ := stripe.EventTypeCheckoutSessionCompleted
		if i%2 == 1 {
			typ = stripe.EventTypeCheckoutSessionAsyncPaymentSucceeded
		}
		oid, b := psp.NewEvent(typ, "acct_shop1", cs, time.Now())
		others, otherIDs = append(others, b), append(otherIDs, oid)
	}

	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); s.MustDeliver(t, payload) }()
	}
	for _, b := range others {
		wg.Add(1)
		go func(b []byte) { defer wg.Done(); s.MustDeliver(t, b) }(b)
	}
	wg.Wait()

	for _, tid := range append(otherIDs, id) {
		testenv.Eventually(t, 30*time.Second, "task "+tid+" completes", func() bool { return s.TaskState(tid) == "completed" })
	}
	if n := s.Count(t, &models.Purchase{}, "psp_checkout_session_id = ?", cs.ID); n != 1 {
		t.Fatalf("%d purchases, want 1", n)
	}
	if n := s.Count(t, &models.Entitlement{}, "1 = 1"); n != 1 {
		t.Fatalf("%d entitlements, want 1", n)
	}
	if n := s.Count(t, &models.TrackedEvent{}, "type = ?", "purchase_completed"); n != 1 {
		t.Fatalf("%d purchase events, want 1", n)
	}
	if n, _ := s.Queue.Len(context.Background(), sh.Tenant.ID); n != 1 {
		t.Fatalf("%d queued events, want 1", n)
	}
}
