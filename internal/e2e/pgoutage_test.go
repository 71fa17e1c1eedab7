//go:build chaos

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/eventq/eventq/internal/eventqueue"
	"github.com/eventq/eventq/internal/eventstore"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/models"
)

// producer tracks one session's events in order, one request at a time, and records the ids
// acknowledged, in acceptance order.
type producer struct {
	session string
	acked   []string
}

// Postgres is stopped with "-m immediate" twice for 4 s while 8 producers track and webhooks
// arrive. No request is answered 5xx; every acknowledged event is stored once and queued once,
// each producer's in the order they were accepted; every paid session is fulfilled once.
func TestChaosPostgresOutagesLoseNothing(t *testing.T) {
	testenv.OnOneDatabase(t) // a Postgres of its own, whatever the suite's database
	pg, db, url := testenv.DurablePostgres(t, "chaos")
	s := startStack(t, roomyQueue, onDatabase(db, url))
	sh := s.MustShop(t, "acct_chaos_pg", true)

	ctx, stop := context.WithCancel(context.Background())
	var (
		mu       sync.Mutex
		statuses = map[int]int{}
		wg       sync.WaitGroup
		client   = &http.Client{Timeout: 10 * time.Second}
	)
	producers := make([]*producer, 8)
	for i := range producers {
		p := &producer{session: fmt.Sprintf("p%d", i)}
		producers[i] = p
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := 0; ctx.Err() == nil; seq++ {
				events := make([]map[string]any, 5)
				for j := range events {
					events[j] = map[string]any{"type": "page_view", "session_id": p.session, "url": "https://shop.example/p", "event_sequence": 5*seq + j}
				}
				body, _ := json.Marshal(map[string]any{"site_key": sh.Tenant.SiteKey, "events": events})
				res, err := client.Post(s.Base+"/api/track", "application/json", bytes.NewReader(body))
				if err != nil {
					t.Errorf("%s: %v", p.session, err)
					return
				}
				var out struct {
					Data struct {
						IDs []string `json:"ids"`
					} `json:"data"`
				}
				json.NewDecoder(res.Body).Decode(&out)
				res.Body.Close()
				mu.Lock()
				statuses[res.StatusCode]++
				mu.Unlock()
				if res.StatusCode == 202 {
					p.acked = append(p.acked, out.Data.IDs...)
				}
			}
		}()
	}
	var sessions []string
	deliver := func() {
		cs := s.PaidSession(sh, "acct_chaos_pg")
		_, payload := s.PSP.AddEvent("acct_chaos_pg", "checkout.session.completed", cs, time.Now())
		s.MustDeliver(t, payload)
		sessions = append(sessions, cs.ID)
	}
	phase := func(d time.Duration) {
		for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(400 * time.Millisecond) {
			deliver()
		}
	}
	phase(3 * time.Second)
	for i := 0; i < 2; i++ {
		pg.Halt()
		phase(4 * time.Second)
		testenv.Must(t, pg.Resume())
		phase(3 * time.Second)
	}
	stop()
	wg.Wait()

	acked := 0
	for _, p := range producers {
		acked += len(p.acked)
	}
	rdb := s.Redis.Client()
	bg := context.Background()
	testenv.Eventually(t, 3*time.Minute, "the spool is stored and every pending event pushed", func() bool {
		spooled, err := s.Queue.SpoolEvents(bg)
		holds, _ := rdb.Exists(bg, eventqueue.HeldKey(sh.Tenant.ID)).Result()
		pending, perr := eventstore.New(db).Count(bg, 0)
		return err == nil && perr == nil && spooled == 0 && holds == 0 && pending == 0
	})
	all, err := rdb.LRange(bg, eventqueue.Key(sh.Tenant.ID), 0, -1).Result()
	testenv.Must(t, err)
	position := map[string]int{}
	duplicated := 0
	for i, raw := range all {
		var ev models.QueueEvent
		testenv.Must(t, json.Unmarshal([]byte(raw), &ev))
		if _, seen := position[ev.ID]; seen {
			duplicated++
		}
		position[ev.ID] = i
	}
	lost, outOfOrder := 0, 0
	for _, p := range producers {
		last := -1
		for _, id := range p.acked {
			at, ok := position[id]
			switch {
			case !ok:
				lost++
			case at < last:
				outOfOrder++
			default:
				last = at
			}
		}
	}
	var rows int64
	testenv.Must(t, db.Model(&models.TrackedEvent{}).Where("tenant_id = ? AND type = 'page_view'", sh.Tenant.ID).Count(&rows).Error)
	testenv.Eventually(t, 3*time.Minute, "every paid session is fulfilled", func() bool {
		var n int64
		return db.Model(&models.Purchase{}).Where("tenant_id = ?", sh.Tenant.ID).Count(&n).Error == nil && n == int64(len(sessions))
	})
	t.Logf("postgres outages: %d events acknowledged, %d stored, %d queued, %d lost, %d duplicated, %d out of order; %d webhooks, each fulfilled once; statuses %v",
		acked, rows, len(all), lost, duplicated, outOfOrder, len(sessions), statuses)
	if acked < 1000 || lost != 0 || duplicated != 0 || outOfOrder != 0 || rows != int64(acked) {
		t.Fatalf("%d acknowledged, %d stored: %d lost, %d duplicated, %d out of order", acked, rows, lost, duplicated, outOfOrder)
	}
	for status := range statuses {
		if status >= 500 {
			t.Fatalf("statuses %v: a database outage must not give a 5xx to tracking", statuses)
		}
	}
}
