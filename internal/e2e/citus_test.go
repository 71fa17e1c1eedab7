package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v76"

	"github.com/eventq/eventq/internal/database"
	"github.com/eventq/eventq/internal/psp"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/models"
)

// A worker node added while two apis track events of several tenants and webhooks fulfil
// purchases, and the shards rebalanced onto it (citus_rebalance_start): every request is
// answered 202 or 200, every event acknowledged is stored once and queued once in its
// tenant's order, and every purchase is fulfilled once. Citus suite only.
func TestRebalanceUnderTracking(t *testing.T) {
	if testenv.Backend() != "citus" {
		t.Skip("adds a node to the Citus suite's cluster")
	}
	cluster, name, url := testenv.IsolatedCitusDatabase(t)
	db, err := database.Open(testenv.Unguarded(url))
	testenv.Must(t, err)
	t.Cleanup(func() { database.Close(db) })
	s := startStack(t, onDatabase(db, url), processes(2, 1))

	const tenants = 6
	shops := make([]shop, tenants)
	tokens := make([]string, tenants)
	for i := range shops {
		shops[i] = s.MustShop(t, fmt.Sprint("acct_rebalance_", i), true)
		tokens[i] = s.MustToken(t, shops[i])
	}

	// Trackers: one per tenant, each request waited for before the next, so that the order a
	// tenant's events were acknowledged in is the order its queue must hold.
	var (
		stop     atomic.Bool
		wg       sync.WaitGroup
		mu       sync.Mutex
		acked    = make([][]string, tenants)
		statuses = map[int]int{}
	)
	for i := range shops {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for n := 0; !stop.Load(); n++ {
				ids, status := track(s.Bases[n%2], shops[i], n)
				mu.Lock()
				statuses[status]++
				if status == 202 {
					acked[i] = append(acked[i], ids...)
				}
				mu.Unlock()
			}
		}(i)
	}
	var sessions []string
	deliver := func(i int) {
		cs := s.PaidSession(shops[i], fmt.Sprint("acct_rebalance_", i))
		_, payload := psp.NewEvent(stripe.EventTypeCheckoutSessionCompleted, fmt.Sprint("acct_rebalance_", i), cs, time.Now())
		s.MustDeliver(t, payload)
		sessions = append(sessions, cs.ID)
	}
	for i := range shops {
		deliver(i)
	}

	worker, err := cluster.AddWorker(name)
	testenv.Must(t, err)
	t.Cleanup(worker.Stop)
	began := time.Now()
	testenv.Must(t, db.Exec("SELECT citus_rebalance_start()").Error)
	for i := range shops { // webhooks while shards move
		deliver(i)
	}
	testenv.Must(t, db.Exec("SELECT citus_rebalance_wait()").Error)
	took := time.Since(began)
	var moved int64
	testenv.Must(t, db.Raw(`SELECT count(*) FROM pg_dist_placement p JOIN pg_dist_node n ON n.groupid = p.groupid WHERE n.nodeport = ?`,
		worker.Port).Scan(&moved).Error)
	if moved == 0 {
		t.Fatal("the rebalance moved no shard onto the new node")
	}
	time.Sleep(500 * time.Millisecond) // tracking goes on after the last move, too
	stop.Store(true)
	wg.Wait()

	if len(statuses) != 1 || statuses[202] == 0 {
		t.Fatalf("tracking answered %v during the rebalance, want only 202", statuses)
	}
	for i, sh := range shops {
		stored := s.Count(t, &models.TrackedEvent{}, "tenant_id = ? AND type = ?", sh.Tenant.ID, "page_view")
		if stored != int64(len(acked[i])) {
			t.Errorf("tenant %d: %d page views stored, %d acknowledged", i, stored, len(acked[i]))
		}
		var queued []string
		testenv.Eventually(t, 60*time.Second, "every acknowledged event is in its queue", func() bool {
			queued = pageViews(t, s, tokens[i])
			return len(queued) >= len(acked[i])
		})
		if !slices.Equal(queued, acked[i]) {
			t.Errorf("tenant %d: queue of %d page views differs from the %d acknowledged, in order", i, len(queued), len(acked[i]))
		}
	}
	testenv.Eventually(t, 60*time.Second, "every purchase is fulfilled", func() bool {
		return s.Count(t, &models.Purchase{}, "1 = 1") == int64(len(sessions))
	})
	for _, id := range sessions {
		if n := s.Count(t, &models.Purchase{}, "psp_checkout_session_id = ?", id); n != 1 {
			t.Errorf("session %s: %d purchases, want 1", id, n)
		}
	}
	t.Logf("rebalance onto a third node: %d shard placements moved in %v; %d tracking requests, all 202; %d purchases",
		moved, took.Round(time.Millisecond), statuses[202], len(sessions))
}

// track posts one event of sh and returns its id and the status.
func track(base string, sh shop, n int) ([]string, int) {
	body, _ := json.Marshal(map[string]any{"site_key": sh.Tenant.SiteKey, "events": []map[string]any{
		{"type": "page_view", "session_id": "s", "url": "https://shop.example/", "event_sequence": n}}})
	res, err := http.Post(base+"/api/track", "application/json", bytes.NewReader(body))
	if err != nil {
		return nil, 0
	}
	defer res.Body.Close()
	var out struct {
		Data struct {
			IDs []string `json:"ids"`
		} `json:"data"`
	}
	json.NewDecoder(res.Body).Decode(&out)
	return out.Data.IDs, res.StatusCode
}

// pageViews reads the page views at the front of the queue of token's tenant, in order.
func pageViews(t *testing.T, s *stack, token string) []string {
	t.Helper()
	res := s.call(t, "GET", s.Base+"/api/platform/events", token, 200)
	var out struct {
		Data struct {
			Events []struct {
				ID   string `json:"id"`
				Type string `json:"type"`
			} `json:"events"`
		} `json:"data"`
	}
	testenv.Must(t, json.Unmarshal(res, &out))
	var ids []string
	for _, e := range out.Data.Events {
		if e.Type == "page_view" {
			ids = append(ids, e.ID)
		}
	}
	return ids
}
