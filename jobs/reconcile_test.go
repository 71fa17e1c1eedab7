package jobs

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/eventq/eventq/internal/clock"
	"github.com/eventq/eventq/internal/payments"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/models"
)

func since72h() payments.ReconcileOptions {
	return payments.ReconcileOptions{Since: time.Now().Add(-payments.DefaultReconcileSince)}
}

func TestReconcileFulfilsMissedDeliveriesOnce(t *testing.T) {
	e := startEnv(t)
	connected := e.MustShop(t, "acct_rec1")
	platform := e.MustShop(t, "")
	cs1, id1, _ := e.PaidSession(t, connected)
	cs2, id2, _ := e.PaidSession(t, platform)
	// 120 partial refunds on the connected account: listed (so the list is paginated past its
	// 100-event pages) but nothing to do.
	for i := 0; i < 120; i++ {
		e.PSP.Refund("acct_rec1", "pi_partial_"+strconv.Itoa(i), 1999, 500)
	}
	// An event of a type eventq does not handle, and one older than the window.
	e.PSP.AddEvent("acct_rec1", "checkout.session.expired", cs1, time.Now())
	old, id3, _ := e.PaidSession(t, connected)
	oldID, _ := e.PSP.AddEvent("acct_rec1", "checkout.session.completed", old, time.Now().Add(-80*time.Hour))

	res, err := e.H.Reconciler.Run(context.Background(), since72h())
	testenv.Must(t, err)
	// Listed: the three completed events created now (cs1, cs2 and the third session's) and the
	// 120 refunds; not the third session's 80-hour-old copy, nor the expired event.
	if res.Checked != 123 || res.Enqueued != 3 {
		t.Fatalf("first run = %+v, want checked 123 (3 checkouts + 120 refunds), enqueued 3", res)
	}
	e.WaitDone(t, id1)
	e.WaitDone(t, id2)
	e.WaitDone(t, id3) // the third session's fresh event: its fulfilment adds a tracked event
	if _, err := e.Inspect.GetTaskInfo("default", oldID); err == nil {
		t.Errorf("an event older than --since was queued")
	}

	t.Run("each missed session is fulfilled once", func(t *testing.T) {
		for _, cs := range []string{cs1.ID, cs2.ID} {
			if n := e.Count(t, &models.Purchase{}, "psp_checkout_session_id = ?", cs); n != 1 {
				t.Errorf("session %s: %d purchases, want 1", cs, n)
			}
		}
		if got := e.QueuedTypes(t, platform.Tenant.ID); len(got) != 1 || got[0] != payments.EventPurchaseCompleted {
			t.Errorf("platform tenant's queue %v, want one purchase_completed", got)
		}
	})

	t.Run("a second run changes nothing", func(t *testing.T) {
		before := e.Count(t, &models.TrackedEvent{}, "1 = 1")
		res, err := e.H.Reconciler.Run(context.Background(), since72h())
		testenv.Must(t, err)
		if res.Checked != 123 || res.Enqueued != 0 {
			t.Fatalf("second run = %+v, want checked 123, enqueued 0", res)
		}
		if n := e.Count(t, &models.Purchase{}, "1 = 1"); n != 3 {
			t.Errorf("%d purchases, want 3", n)
		}
		if n := e.Count(t, &models.TrackedEvent{}, "1 = 1"); n != before {
			t.Errorf("%d tracked events, want %d", n, before)
		}
	})

	t.Run("follows the list's pages on each account", func(t *testing.T) {
		pages := map[string]int{}
		for _, c := range e.PSP.Calls() {
			if c.Path == "/v1/events" {
				pages[c.Account]++
				if c.Form.Get("limit") != "100" || c.Form.Get("created[gte]") == "" || len(c.Form) < 5 {
					t.Errorf("list call form %v, want limit=100, created[gte] and the four types", c.Form)
				}
			}
		}
		// Two runs: the connected account's 123 events take two pages, the platform's one.
		if pages["acct_rec1"] != 4 || pages[""] != 2 {
			t.Errorf("list calls per account %v, want acct_rec1: 4, platform: 2", pages)
		}
	})

	t.Run("--tenant limits the run to that tenant", func(t *testing.T) {
		res, err := e.H.Reconciler.Run(context.Background(), payments.ReconcileOptions{Since: time.Now().Add(-time.Hour), TenantID: platform.Tenant.ID})
		testenv.Must(t, err)
		if res.Checked != 1 || res.Enqueued != 0 {
			t.Errorf("run for the platform tenant = %+v, want checked 1 (its own checkout only)", res)
		}
	})
}

// A webhook delivery and reconciliations racing for the same events fulfil each session once.
func TestReconcileRacingDeliveriesFulfilOnce(t *testing.T) {
	e := startEnv(t)
	s := e.MustShop(t, "acct_race")
	const sessions = 12
	var payloads [][]byte
	var ids []string
	for i := 0; i < sessions; i++ {
		_, id, b := e.PaidSession(t, s)
		ids, payloads = append(ids, id), append(payloads, b)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	enqueued := 0
	for _, b := range payloads {
		wg.Add(1)
		go func(b []byte) {
			defer wg.Done()
			if e.Deliver(t, b) {
				mu.Lock()
				enqueued++
				mu.Unlock()
			}
		}(b)
	}
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := e.H.Reconciler.Run(context.Background(), since72h())
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			enqueued += res.Enqueued
			mu.Unlock()
		}()
	}
	wg.Wait()
	if enqueued != sessions {
		t.Errorf("deliveries and reconciliations queued %d tasks, want %d (one per event)", enqueued, sessions)
	}
	for _, id := range ids {
		e.WaitDone(t, id)
	}
	if n := e.Count(t, &models.Purchase{}, "tenant_id = ?", s.Tenant.ID); n != sessions {
		t.Errorf("%d purchases, want %d", n, sessions)
	}
	if n := e.Count(t, &models.Entitlement{}, "tenant_id = ?", s.Tenant.ID); n != sessions {
		t.Errorf("%d entitlements, want %d", n, sessions)
	}
	if got := e.QueuedTypes(t, s.Tenant.ID); len(got) != sessions {
		t.Errorf("%d queued events, want %d", len(got), sessions)
	}
}

func TestReconcilePeriodicStartsAtTheLastRunMinusOverlap(t *testing.T) {
	e := startEnv(t)
	s := e.MustShop(t, "acct_mark")
	clk := clock.NewFake(time.Now())
	e.H.Reconciler.Clock = clk
	_, id, _ := e.PaidSession(t, s)

	res, err := e.H.Reconciler.RunPeriodic(context.Background())
	testenv.Must(t, err)
	if res.Enqueued != 1 {
		t.Fatalf("first periodic run = %+v, want the missed event queued", res)
	}
	e.WaitDone(t, id)
	first := clk.Now()
	t.Run("moves the metrics", func(t *testing.T) {
		if v := testutil.ToFloat64(e.Metrics.ReconcileMissing); v != 1 {
			t.Errorf("missing events counter %v, want 1", v)
		}
		if v := testutil.ToFloat64(e.Metrics.ReconcileLastSuccess); v < float64(first.Unix()) {
			t.Errorf("last success %v, want at least %d", v, first.Unix())
		}
		if v := testutil.ToFloat64(e.Metrics.ReconcileRuns.WithLabelValues("ok")); v != 1 {
			t.Errorf("ok runs %v, want 1", v)
		}
	})

	clk.Advance(15 * time.Minute)
	res, err = e.H.Reconciler.RunPeriodic(context.Background())
	testenv.Must(t, err)
	if res.Enqueued != 0 {
		t.Errorf("second periodic run = %+v, want nothing queued", res)
	}
	var lists []string
	for _, c := range e.PSP.Calls() {
		if c.Path == "/v1/events" && c.Account == "acct_mark" {
			lists = append(lists, c.Form.Get("created[gte]"))
		}
	}
	wantFirst := strconv.FormatInt(first.Add(-payments.DefaultReconcileSince).Unix(), 10)
	wantSecond := strconv.FormatInt(first.Add(-payments.ReconcileOverlap).Unix(), 10)
	if len(lists) != 2 || lists[0] != wantFirst || lists[1] != wantSecond {
		t.Errorf("created[gte] of the two runs %v, want [%s %s]", lists, wantFirst, wantSecond)
	}
	var mark models.ReconcileMark
	testenv.Must(t, e.DB.Take(&mark).Error)
	if !mark.ReconciledUntil.Equal(clk.Now().UTC().Truncate(time.Microsecond)) && mark.ReconciledUntil.Unix() != clk.Now().Unix() {
		t.Errorf("mark %s, want %s", mark.ReconciledUntil, clk.Now())
	}

	t.Run("a failed run keeps the mark and counts an error", func(t *testing.T) {
		e.PSP.SetDown(true)
		defer e.PSP.SetDown(false)
		clk.Advance(15 * time.Minute)
		if _, err := e.H.Reconciler.RunPeriodic(context.Background()); err == nil {
			t.Fatal("run against a provider that is down succeeded")
		}
		var after models.ReconcileMark
		testenv.Must(t, e.DB.Take(&after).Error)
		if !after.ReconciledUntil.Equal(mark.ReconciledUntil) {
			t.Errorf("mark moved to %s after a failed run", after.ReconciledUntil)
		}
		if v := testutil.ToFloat64(e.Metrics.ReconcileRuns.WithLabelValues("error")); v != 1 {
			t.Errorf("error runs %v, want 1", v)
		}
	})
}

func TestReconcileTaskIsOnePerWindow(t *testing.T) {
	e := startEnv(t)
	at := time.Date(2026, 11, 23, 10, 7, 0, 0, time.UTC)
	_, err := e.Tasks.Enqueue(NewReconcileTask(at, 15*time.Minute))
	testenv.Must(t, err)
	if _, err := e.Tasks.Enqueue(NewReconcileTask(at.Add(7*time.Minute), 15*time.Minute)); !errors.Is(err, asynq.ErrTaskIDConflict) {
		t.Errorf("a second task for the same window: %v, want a task id conflict", err)
	}
	if _, err := e.Tasks.Enqueue(NewReconcileTask(at.Add(8*time.Minute), 15*time.Minute)); err != nil {
		t.Errorf("the next window's task: %v", err)
	}
}
