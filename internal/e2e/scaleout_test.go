package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v76"

	"github.com/eventq/eventq/internal/auth"
	"github.com/eventq/eventq/internal/psp"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/models"
)

// The queue and the webhook path on a real three-master Redis Cluster.
func TestQueueAndWebhookOnRedisCluster(t *testing.T) {
	s := startStack(t, onCluster())
	sh := s.MustShop(t, "acct_shop1", true)
	token := s.MustToken(t, sh)

	ids := s.Track(t, s.Base, sh, 3)
	read := s.Read(t, s.Base, token)
	if len(read) != 3 || read[0] != ids[0] || read[2] != ids[2] {
		t.Fatalf("read %v, want %v", read, ids)
	}
	s.Trim(t, s.Base, token, 2)
	if left := s.Read(t, s.Base, token); len(left) != 1 || left[0] != ids[2] {
		t.Fatalf("after trim %v", left)
	}

	cs := s.PaidSession(sh, "acct_shop1")
	id, payload := psp.NewEvent(stripe.EventTypeCheckoutSessionCompleted, "acct_shop1", cs, time.Now())
	for i := 0; i < 3; i++ {
		s.MustDeliver(t, payload)
	}
	testenv.Eventually(t, 30*time.Second, "the task completes on the cluster", func() bool { return s.TaskState(id) == "completed" })
	if n := s.Count(t, &models.Purchase{}, "1 = 1"); n != 1 {
		t.Fatalf("%d purchases", n)
	}
	if left := s.Read(t, s.Base, token); len(left) != 2 {
		t.Fatalf("queue %v, want the remaining page view and purchase_completed", left)
	}
}

// Two api and two worker processes on one database and one Redis: requests spread over both
// apis keep the queue's read/trim guarantee and fulfilment stays exactly once.
func TestTwoAPIsAndTwoWorkers(t *testing.T) {
	s := startStack(t, processes(2, 2))
	sh := s.MustShop(t, "acct_shop1", true)
	token := s.MustToken(t, sh)

	t.Run("producers on both apis, consumer alternating apis, every event once", func(t *testing.T) {
		const producers, batches = 4, 20
		var wg sync.WaitGroup
		for p := 0; p < producers; p++ {
			wg.Add(1)
			go func(p int) {
				defer wg.Done()
				for b := 0; b < batches; b++ {
					s.Track(t, s.Bases[(p+b)%2], sh, 5)
				}
			}(p)
		}
		seen := map[string]int{}
		deadline := time.Now().Add(60 * time.Second)
		for i := 0; len(seen) < producers*batches*5; i++ {
			if time.Now().After(deadline) {
				t.Fatalf("saw %d events", len(seen))
			}
			got := s.Read(t, s.Bases[i%2], token)
			if len(got) == 0 {
				time.Sleep(5 * time.Millisecond) // consumer back-off
				continue
			}
			for _, id := range got {
				seen[id]++
				if seen[id] > 1 {
					t.Fatalf("event %s seen twice", id)
				}
			}
			s.Trim(t, s.Bases[(i+1)%2], token, len(got))
		}
		wg.Wait()
		if left := s.Read(t, s.Base, token); len(left) != 0 {
			t.Fatalf("%d events left", len(left))
		}
	})

	t.Run("duplicate deliveries across both apis, one purchase per session", func(t *testing.T) {
		const sessions = 10
		var wg sync.WaitGroup
		var all []string
		for i := 0; i < sessions; i++ {
			cs := s.PaidSession(sh, "acct_shop1")
			for j := 0; j < 3; j++ { // the same session under three event ids
				id, payload := psp.NewEvent(stripe.EventTypeCheckoutSessionCompleted, "acct_shop1", cs, time.Now())
				all = append(all, id)
				for _, base := range s.Bases { // each event delivered to both apis at once
					wg.Add(1)
					go func(base string, payload []byte) {
						defer wg.Done()
						s.deliverTo(t, base, payload)
					}(base, payload)
				}
			}
		}
		wg.Wait()
		for _, id := range all {
			testenv.Eventually(t, 60*time.Second, "task "+id+" completes", func() bool { return s.TaskState(id) == "completed" })
		}
		if n := s.Count(t, &models.Purchase{}, "1 = 1"); n != sessions {
			t.Fatalf("%d purchases, want %d", n, sessions)
		}
		if n := s.Count(t, &models.Entitlement{}, "1 = 1"); n != sessions {
			t.Fatalf("%d entitlements, want %d", n, sessions)
		}
		if n := s.Count(t, &models.TrackedEvent{}, "type = ?", "purchase_completed"); n != sessions {
			t.Fatalf("%d purchase events, want %d", n, sessions)
		}
	})
}

// MustToken issues an all-abilities token for sh's tenant.
func (s *stack) MustToken(t *testing.T, sh shop) string {
	t.Helper()
	_, token, err := auth.CreateToken(context.Background(), s.DB, sh.Tenant.ID, "e2e", nil, nil)
	testenv.Must(t, err)
	return token
}

// Track posts n page views for sh to base and returns their ids.
func (s *stack) Track(t *testing.T, base string, sh shop, n int) []string {
	t.Helper()
	events := make([]map[string]any, n)
	for i := range events {
		events[i] = map[string]any{"type": "page_view", "session_id": "s", "url": "https://shop.example/", "event_sequence": i}
	}
	body, _ := json.Marshal(map[string]any{"site_key": sh.Tenant.SiteKey, "events": events})
	res, err := http.Post(base+"/api/track", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Errorf("track: %v", err)
		return nil
	}
	defer res.Body.Close()
	var out struct {
		Data struct {
			IDs []string `json:"ids"`
		} `json:"data"`
	}
	if err := json.NewDecoder(res.Body).Decode(&out); err != nil || res.StatusCode != 202 {
		t.Errorf("track: %d %v", res.StatusCode, err)
	}
	return out.Data.IDs
}

// Read GETs the queue through base and returns the event ids.
func (s *stack) Read(t *testing.T, base, token string) []string {
	t.Helper()
	res := s.call(t, "GET", base+"/api/platform/events", token, 200)
	var out struct {
		Data struct {
			Count  int `json:"count"`
			Events []struct {
				ID string `json:"id"`
			} `json:"events"`
		} `json:"data"`
	}
	testenv.Must(t, json.Unmarshal(res, &out))
	ids := make([]string, len(out.Data.Events))
	for i, e := range out.Data.Events {
		ids[i] = e.ID
	}
	return ids
}

// Trim DELETEs count events through base.
func (s *stack) Trim(t *testing.T, base, token string, count int) {
	t.Helper()
	s.call(t, "DELETE", fmt.Sprintf("%s/api/platform/events?count=%d", base, count), token, 204)
}

func (s *stack) call(t *testing.T, method, url, token string, want int) []byte {
	t.Helper()
	req, _ := http.NewRequest(method, url, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != want {
		t.Fatalf("%s %s: %d %s", method, url, res.StatusCode, b)
	}
	return b
}

// deliverTo signs payload and posts it to base's webhook, requiring 200.
func (s *stack) deliverTo(t *testing.T, base string, payload []byte) {
	req, _ := http.NewRequest("POST", base+"/api/webhooks/psp", bytes.NewReader(payload))
	req.Header.Set("PSP-Signature", psp.Sign(payload, webhookSecret, time.Now()))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Errorf("webhook: %v", err)
		return
	}
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Errorf("webhook: %d", res.StatusCode)
	}
}
