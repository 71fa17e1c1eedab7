package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/eventq/eventq/internal/eventqueue/queuetest"

	"github.com/eventq/eventq/internal/eventqueue"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/models"
)

func TestQueueStats(t *testing.T) {
	e := newCLI(t)
	r := testenv.StartRedis(t)
	e.environ = append(e.environ, "REDIS_URL="+r.URL())
	tenant := e.mustTenant(t, "Acme")
	base := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	for n := 1; n <= 3; n++ {
		e.insertEvent(t, tenant, n, base, nil)
	}
	held := e.insertEvent(t, tenant, 4, base, nil)
	e.db.Model(&held).Update("queue_pending", true)
	id := held.TenantID
	store := eventqueue.New(r.Client())
	defer store.Close()
	if err := queuetest.Append(context.Background(), r.Client(), id, []byte(`{"a":1}`)); err != nil {
		t.Fatal(err)
	}
	// In the queue, its pending mark not cleared yet (the api clears it just after the
	// append): not held back.
	appended := e.insertEvent(t, tenant, 5, base, nil)
	e.db.Model(&appended).Update("queue_pending", true)
	if out := store.AppendOnce(context.Background(), time.Now(), []eventqueue.Batch{{TenantID: id, Events: []eventqueue.Event{{ID: appended.ID, JSON: appended.MarshalQueue()}}}}); out[0].Err != nil {
		t.Fatal(out[0].Err)
	}
	if _, err := store.Lease(context.Background(), id, eventqueue.LeaseArgs{Limit: 1, Visibility: time.Minute, MaxDeliveries: 10}); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf(`{"tenant_id":%q,"length":2,"offset":0,"held_back":1,"leased":1,"dead_letters":0}`, tenant)
	if got := e.MustRun(t, "queue", "stats", "--tenant", tenant); string(got) != want {
		t.Fatalf("stats %s, want %s", got, want)
	}
	t.Run("fails for an unknown tenant", func(t *testing.T) {
		if code, _, stderr := e.Run("queue", "stats", "--tenant", "999999"); code == 0 || stderr == "" {
			t.Fatalf("exit %d, stderr %q", code, stderr)
		}
	})
}

// queue rebuild puts back the queued events after the recorded front, in order, with the
// offset; stats then shows them.
func TestQueueRebuild(t *testing.T) {
	e := newCLI(t)
	r := testenv.StartRedis(t)
	e.environ = append(e.environ, "REDIS_URL="+r.URL())
	tenant, other := e.mustTenant(t, "Acme"), e.mustTenant(t, "Other")
	e.MustRun(t, "feature", "activate", "UseQueueEvents", "--tenant", tenant)
	base := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	var events []models.TrackedEvent
	for n := 1; n <= 5; n++ {
		ev := e.insertEvent(t, tenant, n, base.Add(time.Duration(n)*time.Second), nil)
		e.db.Model(&ev).Update("queued", true)
		events = append(events, ev)
	}
	e.insertEvent(t, other, 6, base, nil) // not queued: its flag is off
	tid := events[0].TenantID
	if err := e.db.Create(&models.QueueFront{TenantID: tid, Front: 2, TrimmedThrough: events[1].ID}).Error; err != nil {
		t.Fatal(err)
	}
	if got := e.MustRun(t, "queue", "rebuild", "--all"); string(got) != `{"tenants":1,"restored":3}` {
		t.Fatalf("rebuild --all: %s", got)
	}
	want := fmt.Sprintf(`{"tenant_id":%q,"length":3,"offset":2,"held_back":0,"leased":0,"dead_letters":0}`, tenant)
	if got := e.MustRun(t, "queue", "stats", "--tenant", tenant); string(got) != want {
		t.Fatalf("stats %s, want %s", got, want)
	}
	raw, err := queuetest.Read(context.Background(), eventqueue.New(r.Client()), tid)
	if err != nil || len(raw) != 3 || !strings.Contains(raw[0], events[2].ID) || !strings.Contains(raw[2], events[4].ID) {
		t.Fatalf("queue %v (%v)", raw, err)
	}
	if got := e.MustRun(t, "queue", "rebuild", "--tenant", tenant); string(got) != `{"tenants":1,"restored":3}` {
		t.Fatalf("rebuild --tenant: %s", got)
	}
	for _, args := range [][]string{{"queue", "rebuild"}, {"queue", "rebuild", "--all", "--tenant", tenant}} {
		if code, _, stderr := e.Run(args...); code == 0 || !strings.Contains(stderr, "either --tenant ID or --all") {
			t.Fatalf("%v: exit %d, stderr %q", args, code, stderr)
		}
	}
}
