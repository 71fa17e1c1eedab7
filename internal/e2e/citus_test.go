package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
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

	const tenants, sessionsEach = 3, 4
	shops := make([]shop, tenants)
	tokens := make([]string, tenants)
	for i := range shops {
		shops[i] = s.MustShop(t, fmt.Sprint("acct_rebalance_", i), true)
		tokens[i] = s.MustToken(t, shops[i])
	}
	stopHogs := testenv.CPUHogs(t) // EVENTQ_TEST_CPU_HOGS: a run on a loaded machine
	defer stopHogs()

	// Trackers: several sessions of each tenant, each request waited for before the next and
	// sent to the other api than the one before, so that the order a session's events were
	// acknowledged in is the order its queue must hold them in, whichever api took them.
	var (
		stop     atomic.Bool
		wg       sync.WaitGroup
		mu       sync.Mutex
		acked    = make([][]string, tenants)   // every acknowledged id of the tenant
		bySess   = make([][][]string, tenants) // [tenant][session] in acknowledgement order
		statuses = map[int]int{}
	)
	for i := range shops {
		bySess[i] = make([][]string, sessionsEach)
		for k := range sessionsEach {
			wg.Add(1)
			go func(i, k int) {
				defer wg.Done()
				for n := 0; !stop.Load(); n++ {
					ids, status := trackSession(s.Bases[(n+k)%2], shops[i], fmt.Sprint("s", k), n)
					mu.Lock()
					statuses[status]++
					if status == 202 {
						acked[i] = append(acked[i], ids...)
						bySess[i][k] = append(bySess[i][k], ids...)
					}
					mu.Unlock()
				}
			}(i, k)
		}
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
		// Requests whose commit was slow during a move were spooled: the worker stores them.
		var stored int64
		testenv.Eventually(t, 60*time.Second, "every acknowledged event is stored", func() bool {
			stored = s.Count(t, &models.TrackedEvent{}, "tenant_id = ? AND type = ?", sh.Tenant.ID, "page_view")
			return stored >= int64(len(acked[i]))
		})
		if stored != int64(len(acked[i])) {
			t.Errorf("tenant %d: %d page views stored, %d acknowledged", i, stored, len(acked[i]))
		}
		var queued []string
		testenv.Eventually(t, 60*time.Second, "every acknowledged event is in its queue", func() bool {
			queued = pageViews(t, s, tokens[i])
			return len(queued) >= len(acked[i])
		})
		// Each acknowledged event once, and each session's in the order it was acknowledged.
		if got, want := slices.Sorted(slices.Values(queued)), slices.Sorted(slices.Values(acked[i])); !slices.Equal(got, want) {
			t.Errorf("tenant %d: queue of %d page views is not the %d acknowledged: %s", i, len(queued), len(acked[i]), queueDiff(queued, acked[i]))
		}
		at := make(map[string]int, len(queued))
		for p, id := range queued {
			at[id] = p
		}
		for k, ids := range bySess[i] {
			for j := 1; j < len(ids); j++ {
				if at[ids[j]] < at[ids[j-1]] {
					t.Errorf("tenant %d, session s%d: its event %d (%s) queued at %d, before its event %d (%s) at %d",
						i, k, j, ids[j], at[ids[j]], j-1, ids[j-1], at[ids[j-1]])
					break
				}
			}
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
func track(base string, sh shop, n int) ([]string, int) { return trackSession(base, sh, "s", n) }

// trackSession posts five events of sh's session and returns their ids and the status.
func trackSession(base string, sh shop, session string, n int) ([]string, int) {
	events := make([]map[string]any, 5)
	for j := range events {
		events[j] = map[string]any{"type": "page_view", "session_id": session, "url": "https://shop.example/", "event_sequence": 5*n + j}
	}
	if session == "s" { // track's one event
		events = events[:1]
		events[0]["event_sequence"] = n
	}
	body, _ := json.Marshal(map[string]any{"site_key": sh.Tenant.SiteKey, "events": events})
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

// A worker node that stops is a database outage for the tenants it holds and for no other:
// their tracking is spooled (202) and stored once the node is back, while every other tenant's
// events are stored as they are acknowledged from 5 seconds after the stop on, not spooled.
// Nothing is lost, doubled or reordered. Citus suite only; the cluster is the test's own.
func TestStoppedNodeIsAnOutageOfItsTenantsOnly(t *testing.T) {
	if testenv.Backend() != "citus" {
		t.Skip("stops a node of a Citus cluster")
	}
	// Durable nodes: the halt is a crash (SIGQUIT), which without synchronous_commit loses the
	// last commits, a settled pending batch's delete among them, so its events were queued
	// again (a run found six).
	cluster, err := testenv.StartCitus("synchronous_commit=on", "fsync=on")
	testenv.Must(t, err)
	t.Cleanup(cluster.Stop)
	url, err := cluster.CreateMigratedDatabase("nodestop")
	testenv.Must(t, err)
	db, err := database.Open(testenv.Unguarded(url))
	testenv.Must(t, err)
	t.Cleanup(func() { database.Close(db) })
	s := startStack(t, onDatabase(db, url))

	// Tenants until both worker nodes hold some.
	victim := cluster.Worker(0)
	var shops []shop
	var onVictim []bool
	for n := 0; n < 4 || !slices.Contains(onVictim, true) || !slices.Contains(onVictim, false); n++ {
		if n == 32 {
			t.Fatal("32 tenants, all on one node")
		}
		sh := s.MustShop(t, fmt.Sprint("acct_nodestop_", n), true)
		var port int
		testenv.Must(t, db.Raw(`SELECT n.nodeport FROM pg_dist_placement p JOIN pg_dist_node n ON n.groupid = p.groupid
			WHERE p.shardid = get_shard_id_for_distribution_column('audience_members', CAST(? AS bigint))`, sh.Tenant.ID).Scan(&port).Error)
		shops, onVictim = append(shops, sh), append(onVictim, port == victim.Port)
	}

	var (
		stop      atomic.Bool
		stoppedAt atomic.Int64 // unix nanoseconds, once the node is stopped
		wg        sync.WaitGroup
		mu        sync.Mutex
		acked     = make([][]string, len(shops))
		statuses  = map[int]int{}
		late      int // a live tenant's events acknowledged 5 s after the stop but not stored
		checked   int
	)
	for i := range shops {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for n := 0; !stop.Load(); n++ {
				ids, status := track(s.Base, shops[i], n)
				at := stoppedAt.Load()
				if status == 202 && !onVictim[i] && at != 0 && time.Since(time.Unix(0, at)) > 5*time.Second {
					var stored int64
					testenv.Must(t, db.Raw("SELECT count(*) FROM tracked_events WHERE tenant_id = ? AND id IN ?", shops[i].Tenant.ID, ids).Scan(&stored).Error)
					mu.Lock()
					checked++
					if stored != int64(len(ids)) {
						late++
					}
					mu.Unlock()
				}
				mu.Lock()
				statuses[status]++
				if status == 202 {
					acked[i] = append(acked[i], ids...)
				}
				mu.Unlock()
				time.Sleep(5 * time.Millisecond)
			}
		}(i)
	}
	time.Sleep(time.Second)
	victim.Halt()
	stoppedAt.Store(time.Now().UnixNano())
	time.Sleep(8 * time.Second)
	ctx := context.Background()
	for i, sh := range shops {
		spooled, err := s.Queue.Spooled(ctx, sh.Tenant.ID)
		testenv.Must(t, err)
		if onVictim[i] && !spooled {
			t.Errorf("tenant %d, on the stopped node: nothing spooled", i)
		}
	}
	testenv.Must(t, victim.Resume())
	time.Sleep(time.Second)
	stop.Store(true)
	wg.Wait()

	if len(statuses) != 1 || statuses[202] == 0 {
		t.Fatalf("tracking answered %v, want only 202", statuses)
	}
	if checked == 0 || late > 0 {
		t.Fatalf("of %d requests of tenants on the live node from 5 s after the stop on, %d were not stored when acknowledged", checked, late)
	}
	for i, sh := range shops {
		testenv.Eventually(t, 60*time.Second, "every acknowledged event is stored and queued", func() bool {
			stored := s.Count(t, &models.TrackedEvent{}, "tenant_id = ?", sh.Tenant.ID)
			return stored == int64(len(acked[i])) && len(pageViews(t, s, s.MustToken(t, sh))) >= len(acked[i])
		})
		if queued := pageViews(t, s, s.MustToken(t, sh)); !slices.Equal(queued, acked[i]) {
			t.Errorf("tenant %d (on the stopped node: %v): queue of %d differs from the %d acknowledged, in order: %s", i, onVictim[i], len(queued), len(acked[i]), queueDiff(queued, acked[i]))
		}
	}
	t.Logf("a node stopped for 8 s: %d tracking requests, all 202; %d of the live tenants' checked as stored when acknowledged", statuses[202], checked)
}

// queueDiff says how queued differs from acked: the first index at which they differ, and
// the ids queued twice or never acknowledged, each with its positions in both.
func queueDiff(queued, acked []string) string {
	at := map[string][]int{}
	for i, id := range queued {
		at[id] = append(at[id], i)
	}
	ackedAt := map[string]int{}
	for i, id := range acked {
		ackedAt[id] = i
	}
	var odd []string
	for id, pos := range at {
		if a, ok := ackedAt[id]; len(pos) > 1 || !ok {
			odd = append(odd, fmt.Sprintf("%s queued at %v, acknowledged %d (%v)", id, pos, a, ok))
		}
	}
	slices.Sort(odd)
	return fmt.Sprintf("first difference at %d; %d odd: %s", firstDiff(queued, acked), len(odd), strings.Join(odd, "; "))
}

// firstDiff is the first index at which a and b differ (the shorter one's length if one is the
// other's prefix).
func firstDiff(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
