package main

import (
	"context"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/eventq/eventq/internal/testenv"
)

// Through a Postgres outage the api keeps tracking (202, within 2 s, events spooled), answers
// what needs the database 503 with Retry-After, never 500, and serves the site keys and tokens
// it had seen; once the database is back the spool is stored and queued in acceptance order.
func TestTheAPIThroughAPostgresOutage(t *testing.T) {
	testenv.OnOneDatabase(t) // a Postgres of its own, whatever the suite's database
	pg, db, url := testenv.DurablePostgres(t, "outage")
	e := startAPIOn(t, testenv.StartRedis(t), db, url)
	tn := testenv.MustTenant(t, db, true)
	unseen := testenv.MustTenant(t, db, true)

	want := e.MustTrack(t, tn, pageView("s", 1)) // the site key, the flag and the token are read
	e.MustRead(t, tn)
	pg.Halt()
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			pg.Resume()
		}
	})

	t.Run("tracking is answered 202 within 2 s", func(t *testing.T) {
		for i := 2; i <= 6; i++ {
			start := time.Now()
			want = append(want, e.MustTrack(t, tn, pageView("s", i))...)
			if took := time.Since(start); took > 2*time.Second {
				t.Fatalf("request %d answered after %s", i, took)
			}
		}
		res := e.Do(t, "POST", "/api/platform/track", tn.Token, []byte(`{"events":[{"type":"page_view","session_id":"s","url":"https://shop.example/p","event_sequence":7}]}`))
		if res.Status != 202 {
			t.Fatalf("platform track: %d %s", res.Status, res.Body)
		}
	})
	t.Run("what needs the database is 503 with Retry-After", func(t *testing.T) {
		for _, r := range []struct{ method, path, token string }{
			{"GET", "/api/platform/events", unseen.Token},            // a token never read
			{"GET", "/checkout/return?tenant=1&session_id=cs_x", ""}, // the purchases are read
		} {
			start := time.Now()
			res := e.Do(t, r.method, r.path, r.token, nil)
			assertBody(t, res, 503, `{"message":"Service Unavailable."}`)
			if res.Header.Get("Retry-After") != "2" || time.Since(start) > 2*time.Second {
				t.Fatalf("%s: Retry-After %q after %s", r.path, res.Header.Get("Retry-After"), time.Since(start))
			}
		}
		assertBody(t, e.Do(t, "POST", "/api/track", "", trackBody(unseen, 1)), 503, `{"message":"Service Unavailable."}`)
		if res := e.Do(t, "GET", "/readyz", "", nil); res.Status != 503 || !regexp.MustCompile(`"database"`).Match(res.Body) {
			t.Fatalf("readyz: %d %s", res.Status, res.Body)
		}
		if res := e.Do(t, "POST", "/api/webhooks/psp", "", []byte(`{}`)); res.Status != 200 {
			t.Fatalf("webhook: %d", res.Status)
		}
	})
	t.Run("the spool's length is on /metrics", func(t *testing.T) {
		res := e.getMetrics(t)
		if !regexp.MustCompile(`(?m)^eventq_ingest_spool_events 6$`).Match(res.Body) {
			t.Fatalf("no eventq_ingest_spool_events 6 in /metrics:\n%s", regexp.MustCompile(`(?m)^eventq_ingest_spool.*$`).FindAll(res.Body, -1))
		}
	})

	if err := pg.Resume(); err != nil {
		t.Fatal(err)
	}
	restarted = true
	for i := 0; i < 20 && db.Exec("SELECT 1").Error != nil; i++ { // the test's own connections the restart closed
	}
	later := e.MustTrack(t, tn, pageView("s", 8)) // stored directly, held behind the spool
	// As the worker does: until it succeeds (the first statements after the restart may meet
	// connections the restart closed).
	for deadline := time.Now().Add(10 * time.Second); ; {
		_, err := e.Main.App.Ingest.Delivery().DrainSpool(context.Background(), "test")
		left, _ := e.Main.App.Queue.SpoolEvents(context.Background())
		if err == nil && left == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the spool still holds %d events: %v", left, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	got := e.MustRead(t, tn)
	var ids []string
	for _, ev := range got.Data.Events {
		ids = append(ids, ev.ID)
	}
	if len(ids) != 8 || !slices.Equal(ids[:6], want) || ids[7] != later[0] {
		t.Fatalf("queue %v: want %v, the platform event, then %v", ids, want, later)
	}
	if rows := e.EventRows(t, tn); rows != 8 {
		t.Fatalf("%d rows, want 8", rows)
	}
}
