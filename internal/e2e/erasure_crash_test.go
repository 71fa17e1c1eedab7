//go:build chaos

package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/eventq/eventq/internal/eventqueue"
	"github.com/eventq/eventq/internal/eventqueue/queuetest"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/models"
)

// A worker SIGKILLed in the middle of an erasure's deletions: the restarted worker finishes
// it, and every event is deleted and counted once; the queued copies are redacted once.
func TestChaosErasureSurvivesAKilledWorker(t *testing.T) {
	s := startStack(t)
	sh := s.MustShop(t, "", true)
	member := models.FormatID(sh.Member.ID)
	now := time.Now().UTC().Add(-time.Hour)
	const named, shared, unrelated = 30_000, 3_000, 3_000
	rows := make([]models.TrackedEvent, 0, named+shared+unrelated)
	for i := 0; i < named+shared+unrelated; i++ {
		ev := models.TrackedEvent{ID: fmt.Sprintf("01a20000-0000-7000-8000-%012d", i), TenantID: sh.ID, Type: "page_view",
			SessionID: fmt.Sprintf("m-%d", i%300), URL: "https://shop.example/a", PageHostname: "shop.example", PagePath: "/a",
			UserAgent: "ua", IPAddress: "203.0.113.7", EventSequence: int64(i), Queued: true, CreatedAt: now.Add(time.Duration(i) * time.Millisecond)}
		switch {
		case i < named:
			ev.AudienceMemberID = &member
		case i >= named+shared:
			ev.SessionID = fmt.Sprintf("other-%d", i)
		}
		rows = append(rows, ev)
	}
	testenv.Must(t, s.DB.CreateInBatches(rows, 1000).Error)
	// The last 500 of each kind in the queue too.
	var queued [][]byte
	theirs := 0 // queued events of the member or its sessions
	for i := range rows {
		if i%1000 >= 500 {
			queued = append(queued, rows[i].MarshalQueue())
			if i < named+shared {
				theirs++
			}
		}
	}
	testenv.Must(t, queuetest.Append(t.Context(), s.Redis.Client(), sh.ID, queued...))

	req, _ := http.NewRequest("DELETE", s.Base+"/api/platform/members/"+member, nil)
	req.Header.Set("Authorization", "Bearer "+sh.Token)
	res, err := http.DefaultClient.Do(req)
	testenv.Must(t, err)
	res.Body.Close()
	if res.StatusCode != 202 {
		t.Fatalf("erase: %d", res.StatusCode)
	}
	var e models.MemberErasure
	deadline := time.Now().Add(30 * time.Second)
	for {
		testenv.Must(t, s.DB.Where("member_id = ?", sh.Member.ID).Take(&e).Error)
		if e.Status == models.ErasureDone {
			t.Fatal("the erasure finished before the worker could be killed in its middle: give it more events")
		}
		if e.EventsDeleted != nil && *e.EventsDeleted > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the worker did not start the erasure")
		}
		time.Sleep(2 * time.Millisecond)
	}
	s.Worker.Kill()
	testenv.Must(t, s.DB.Take(&e, e.ID).Error)
	if e.Status != models.ErasurePending || *e.EventsDeleted >= named+shared {
		t.Fatalf("killed too late: %+v", e)
	}
	t.Logf("killed after %d of %d deletions", *e.EventsDeleted, named+shared)
	s.Worker.Start()
	testenv.Eventually(t, 60*time.Second, "the restarted worker finishes the erasure", func() bool {
		testenv.Must(t, s.DB.Take(&e, e.ID).Error)
		return e.Status == models.ErasureDone
	})
	if *e.EventsDeleted != named+shared || *e.EventsRedacted != int64(theirs) {
		t.Fatalf("deleted %d (want %d), redacted %d (want %d)", *e.EventsDeleted, named+shared, *e.EventsRedacted, theirs)
	}
	if n := s.Count(t, &models.TrackedEvent{}, "tenant_id = ?", sh.ID); n != unrelated {
		t.Fatalf("%d events left, want the %d unrelated", n, unrelated)
	}
	els, err := s.Redis.Client().LRange(t.Context(), eventqueue.Key(sh.ID), 0, -1).Result()
	testenv.Must(t, err)
	if len(els) != len(queued) {
		t.Fatalf("queue length %d, want %d", len(els), len(queued))
	}
	for _, el := range els {
		if strings.Contains(el, `"audience_member_id":"`+member+`"`) || strings.Contains(el, `"session_id":"m-`) {
			t.Fatalf("left in the queue: %s", el)
		}
	}
}
