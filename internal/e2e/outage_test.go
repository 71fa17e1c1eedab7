package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v76"

	"github.com/eventq/eventq/internal/psp"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/models"
)

// With the worker stopped, webhooks are still acknowledged at once; once it starts, every
// queued checkout is fulfilled.
func TestWebhooksAreAcknowledgedWhileTheWorkerIsDown(t *testing.T) {
	s := startStack(t)
	s.Worker.Stop()
	sh := s.MustShop(t, "acct_shop1", false)

	const n = 50
	took := make([]time.Duration, n)
	sessions := make([]string, n)
	for i := range took {
		cs := s.PaidSession(sh, "acct_shop1")
		_, payload := psp.NewEvent(stripe.EventTypeCheckoutSessionCompleted, "acct_shop1", cs, time.Now())
		sessions[i] = cs.ID
		took[i] = s.MustDeliver(t, payload)
	}
	sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
	t.Logf("webhook acknowledgement with the worker down, %d sequential deliveries: p50 %s, max %s", n, took[n/2], took[n-1])
	if took[n-1] > 500*time.Millisecond {
		t.Fatalf("slowest acknowledgement %s, want well under a second", took[n-1])
	}
	if c := s.Count(t, &models.Purchase{}, "1 = 1"); c != 0 {
		t.Fatalf("%d purchases without a worker", c)
	}

	s.Worker.Start()
	testenv.Eventually(t, 60*time.Second, "every checkout is fulfilled", func() bool {
		return s.Count(t, &models.Purchase{}, "1 = 1") == n
	})
	if c := s.Count(t, &models.Entitlement{}, "1 = 1"); c != n {
		t.Fatalf("%d entitlements, want %d", c, n)
	}
}

// Redis is down when a webhook arrives: it is still answered 200, the verified event waits
// in the database inbox, and it is fulfilled once Redis is back.
func TestWebhookDuringRedisOutageIsFulfilledLater(t *testing.T) {
	s := startStack(t)
	sh := s.MustShop(t, "acct_shop1", true)
	cs := s.PaidSession(sh, "acct_shop1")
	id, payload := psp.NewEvent(stripe.EventTypeCheckoutSessionCompleted, "acct_shop1", cs, time.Now())

	s.Redis.Stop()
	took := s.MustDeliver(t, payload)
	s.MustDeliver(t, payload) // a redelivery during the outage adds nothing
	t.Logf("acknowledgement with Redis down: %s", took)
	if took > time.Second {
		t.Fatalf("webhook took %s with Redis down", took)
	}
	if c := s.Count(t, &models.WebhookInbox{}, "event_id = ?", id); c != 1 {
		t.Fatalf("%d inbox rows, want 1", c)
	}
	s.Redis.Start()

	testenv.Eventually(t, 60*time.Second, "the inboxed checkout is fulfilled", func() bool {
		return s.Count(t, &models.Purchase{}, "psp_checkout_session_id = ?", cs.ID) == 1
	})
	testenv.Eventually(t, 20*time.Second, "the inbox is drained", func() bool {
		return s.Count(t, &models.WebhookInbox{}, "1 = 1") == 0
	})
	if c := s.Count(t, &models.Entitlement{}, "1 = 1"); c != 1 {
		t.Fatalf("%d entitlements", c)
	}
}

// The webhook (through the worker) and the member's return page race for one paid session.
func TestWebhookAndReturnPageRaceMakeOnePurchase(t *testing.T) {
	s := startStack(t)
	sh := s.MustShop(t, "acct_shop1", true)
	for round := 0; round < 5; round++ {
		cs := s.PaidSession(sh, "acct_shop1")
		_, payload := psp.NewEvent(stripe.EventTypeCheckoutSessionCompleted, "acct_shop1", cs, time.Now())
		var (
			wg       sync.WaitGroup
			mu       sync.Mutex
			statuses []string
		)
		for i := 0; i < 4; i++ {
			wg.Add(2)
			go func() { defer wg.Done(); s.MustDeliver(t, payload) }()
			go func() {
				defer wg.Done()
				st := s.returnPage(t, sh, cs.ID)
				mu.Lock()
				statuses = append(statuses, st)
				mu.Unlock()
			}()
		}
		wg.Wait()
		testenv.Eventually(t, 20*time.Second, "the webhook task has run", func() bool {
			return s.Count(t, &models.TrackedEvent{}, "session_id = ?", cs.ID) == 1 && s.returnPage(t, sh, cs.ID) == "already_fulfilled"
		})
		if c := s.Count(t, &models.Purchase{}, "psp_checkout_session_id = ?", cs.ID); c != 1 {
			t.Fatalf("round %d: %d purchases", round, c)
		}
		fulfilled := 0
		for _, st := range statuses {
			if st == "fulfilled" {
				fulfilled++
			} else if st != "already_fulfilled" {
				t.Fatalf("return page status %q", st)
			}
		}
		if fulfilled > 1 {
			t.Fatalf("round %d: %d return pages claim to have fulfilled", round, fulfilled)
		}
	}
	if c := s.Count(t, &models.Entitlement{}, "1 = 1"); c != 5 {
		t.Fatalf("%d entitlements, want 5", c)
	}
}

func (s *stack) returnPage(t *testing.T, sh shop, sessionID string) string {
	t.Helper()
	req, _ := http.NewRequest("GET", fmt.Sprintf("%s/checkout/return?tenant=%d&session_id=%s", s.Base, sh.Tenant.ID, sessionID), nil)
	req.Header.Set("Accept", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Errorf("return page: %v", err)
		return ""
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	var out struct {
		Data struct {
			Status string `json:"status"`
		} `json:"data"`
	}
	if res.StatusCode != 200 || json.Unmarshal(b, &out) != nil {
		t.Errorf("return page: %d %s", res.StatusCode, b)
	}
	return out.Data.Status
}
