package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/eventq/eventq/internal/erasure"
	"github.com/eventq/eventq/internal/eventqueue"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/models"
)

// An event names a member by its id ("1") or by "external:" + its external id: a member whose
// id is N and another whose external id is "N" are never confused, by the access export or
// by an erasure.
func TestAnIDAndAnEqualExternalIDNameDifferentMembers(t *testing.T) {
	e := startAPI(t)
	s := testenv.MustShop(t, e.DB, "", true)
	first := s.Member
	id := models.FormatID(first.ID)
	other := models.AudienceMember{TenantID: s.ID, Email: "other@example.com", Name: "Bob", ExternalID: &id}
	testenv.Must(t, e.DB.Create(&other).Error)

	ev := func(session, who string) map[string]any {
		m := pageView(session, 1)
		m["audience_member_id"] = who
		m["url"] = "https://shop.example/" + session
		return m
	}
	e.MustTrack(t, s.Tenant, ev("s-first", id), ev("s-other", "external:"+id))

	sessions := func(export string) []string {
		var out []string
		for _, line := range strings.Split(strings.TrimSpace(export), "\n") {
			if i := strings.Index(line, `"session_id":"`); i >= 0 && strings.HasPrefix(line, `{"kind":"event"`) {
				out = append(out, strings.SplitN(line[i+len(`"session_id":"`):], `"`, 2)[0])
			}
		}
		return out
	}
	for ref, want := range map[string]string{id: "s-first", "external:" + id: "s-other", models.FormatID(other.ID): "s-other"} {
		res := e.doJSON(t, "GET", "/api/platform/members/"+ref+"/data", s.Token, nil)
		if got := sessions(string(res.Body)); res.Status != 200 || len(got) != 1 || got[0] != want {
			t.Fatalf("export of %s: %d, sessions %v, want [%s]", ref, res.Status, got, want)
		}
	}

	res := e.doJSON(t, "DELETE", "/api/platform/members/"+id, s.Token, nil)
	if res.Status != 202 {
		t.Fatalf("erase: %d %s", res.Status, res.Body)
	}
	var erasure models.MemberErasure
	testenv.Must(t, e.DB.Where("member_id = ?", first.ID).Take(&erasure).Error)
	testenv.Must(t, e.Main.App.Erasures.Run(context.Background(), erasure.TenantID, erasure.ID))
	var left []models.TrackedEvent
	testenv.Must(t, e.DB.Where("tenant_id = ?", s.ID).Find(&left).Error)
	if len(left) != 1 || left[0].SessionID != "s-other" || left[0].AudienceMemberID == nil || *left[0].AudienceMemberID != "external:"+id {
		t.Fatalf("after erasing member %s, stored: %+v; want only the other member's event", id, left)
	}
}

// An erasure's 202 reaches every api process before the next event is accepted there: an
// event naming the member, tracked on another api process right after the 202 (whose cache
// of erased members was just read), is stored and queued without the member, and the
// erasure, once done, leaves it. Without the erasure count each process would trust its
// cache for half a second, and the erasure would delete those events instead.
func TestAnErasureReachesEveryAPIProcessBeforeTheNextEvent(t *testing.T) {
	a := startAPI(t)
	b := startAPIOn(t, a.Redis, a.DB, a.DBURL)
	s := testenv.MustShop(t, a.DB, "", true)
	ext := "user-77"
	testenv.Must(t, a.DB.Model(&s.Member).Update("external_id", ext).Error)
	id := models.FormatID(s.Member.ID)
	ev := func(session, who string) map[string]any {
		m := pageView(session, 1)
		m["audience_member_id"] = who
		return m
	}
	for round := 0; round < 3; round++ {
		b.MustTrack(t, s.Tenant, ev(fmt.Sprintf("warm-%d", round), id)) // b reads its erased members now
	}
	if res := a.doJSON(t, "DELETE", "/api/platform/members/"+id, s.Token, nil); res.Status != 202 {
		t.Fatalf("erase: %d %s", res.Status, res.Body)
	}
	late := b.MustTrack(t, s.Tenant, ev("late-id", id), ev("late-ext", "external:"+ext))
	var rows []models.TrackedEvent
	testenv.Must(t, a.DB.Where("id IN ?", late).Find(&rows).Error)
	if len(rows) != 2 {
		t.Fatalf("%d of the late events stored", len(rows))
	}
	for _, r := range rows {
		if r.AudienceMemberID != nil {
			t.Fatalf("an event tracked after the 202 on another api process names the member: %+v", r)
		}
	}
	for _, q := range b.MustRead(t, s.Tenant).Data.Events {
		if strings.HasPrefix(q.SessionID, "late") && q.AudienceMemberID != nil {
			t.Fatalf("queued naming the member: %+v", q)
		}
	}
	var erasure models.MemberErasure
	testenv.Must(t, a.DB.Where("member_id = ?", s.Member.ID).Take(&erasure).Error)
	testenv.Must(t, a.Main.App.Erasures.Run(context.Background(), erasure.TenantID, erasure.ID))
	var kept int64
	testenv.Must(t, a.DB.Model(&models.TrackedEvent{}).Where("id IN ?", late).Count(&kept).Error)
	if kept != 2 {
		t.Fatalf("the erasure deleted %d of the events tracked after its 202", 2-kept)
	}

	t.Run("a former external id names the member that takes it", func(t *testing.T) {
		if res := a.doJSON(t, "POST", "/api/platform/members", s.Token, map[string]any{"email": "new@example.com", "external_id": ext}); res.Status != 201 {
			t.Fatalf("%d %s", res.Status, res.Body)
		}
		ids := b.MustTrack(t, s.Tenant, ev("new-owner", "external:"+ext))
		var r models.TrackedEvent
		testenv.Must(t, a.DB.Where("id = ?", ids[0]).Take(&r).Error)
		if r.AudienceMemberID == nil || *r.AudienceMemberID != "external:"+ext {
			t.Fatalf("stored %v, want external:%s", r.AudienceMemberID, ext)
		}
	})
}

// An erasure is done only once its tenant's ingestion spool is drained (whose drain drops the
// member's events): while the spool holds requests it waits, pending, and the worker's loop
// goes on with the other erasures.
func TestAnErasureWaitsForItsTenantsSpool(t *testing.T) {
	e := startAPI(t)
	s := testenv.MustShop(t, e.DB, "", true)
	ctx := context.Background()
	res := e.doJSON(t, "DELETE", "/api/platform/members/"+models.FormatID(s.Member.ID), s.Token, nil)
	if res.Status != 202 {
		t.Fatalf("erase: %d %s", res.Status, res.Body)
	}
	var er models.MemberErasure
	testenv.Must(t, e.DB.Where("member_id = ?", s.Member.ID).Take(&er).Error)
	entry := []byte("an entry")
	lim := eventqueue.SpoolLimits{Events: 10, TenantEvents: 10, Bytes: 1 << 20}
	testenv.Must(t, e.Queue.Spool(ctx, s.ID, entry, 1, lim))
	if err := e.Main.App.Erasures.Run(ctx, er.TenantID, er.ID); !errors.Is(err, erasure.ErrSpooled) {
		t.Fatalf("Run with a spool: %v, want ErrSpooled", err)
	}
	if n, err := e.Main.App.Erasures.RunPending(ctx); err != nil || n != 0 {
		t.Fatalf("RunPending: %d, %v; want 0 finished and no error", n, err)
	}
	testenv.Must(t, e.DB.Take(&er, er.ID).Error)
	if er.Status != models.ErasurePending {
		t.Fatalf("status %s while the spool holds a request", er.Status)
	}
	if _, err := e.Queue.SpoolDrop(ctx, s.ID, 1, 1, len(entry)); err != nil {
		t.Fatal(err)
	}
	testenv.Must(t, e.Main.App.Erasures.Run(ctx, er.TenantID, er.ID))
	testenv.Must(t, e.DB.Take(&er, er.ID).Error)
	if er.Status != models.ErasureDone {
		t.Fatalf("status %s after the drain", er.Status)
	}
}
