package main

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/models"
)

// An erasure through the api: 202, the member 404 at once and its external id free, then the
// worker's run: the member's events and those sharing its sessions deleted, their queued
// copies (one of them a dead letter) redacted in place with ids and offsets kept, purchases
// kept and entitlements ended, a lease taken before still acknowledging its redacted event,
// an event tracked after the 202 stored without the member.
func TestEraseAMember(t *testing.T) {
	e := startAPI(t, "EVENTQUEUE_MAX_DELIVERIES=1")
	s := testenv.MustShop(t, e.DB, "", true)
	ext := "site-user-5"
	testenv.Must(t, e.DB.Model(&s.Member).Update("external_id", ext).Error)
	member, extRef := models.FormatID(s.Member.ID), "external:"+ext
	p := models.Purchase{TenantID: s.ID, AudienceMemberID: s.Member.ID, ProductID: s.Product.ID, PSPCheckoutSessionID: "cs_erase",
		AmountTotal: 1999, Currency: "usd", Status: models.PurchasePaid}
	testenv.Must(t, e.DB.Create(&p).Error)
	testenv.Must(t, e.DB.Create(&models.Entitlement{TenantID: s.ID, AudienceMemberID: s.Member.ID, ProductID: s.Product.ID, PurchaseID: p.ID}).Error)

	ev := func(session string, who *string) map[string]any {
		m := pageView(session, 1)
		if who != nil {
			m["audience_member_id"] = *who
		}
		return m
	}
	// The first event goes to the dead letters: leased and retried once, the next lease moves it.
	ids := e.MustTrack(t, s.Tenant, ev("s-a", &member))
	if st := e.mustAck(t, s.Tenant, map[string]any{"retries": leaseIDs(e.mustLease(t, s.Tenant, "?limit=1"))}); len(st) != 1 || st[0] != "retried" {
		t.Fatalf("retry: %v", st)
	}
	ids = append(ids, e.MustTrack(t, s.Tenant, ev("s-a", nil), ev("s-b", &extRef), ev("s-c", nil))...)
	held := e.mustLease(t, s.Tenant, "?limit=1") // the retried event goes dead; the next one is leased
	before := e.MustRead(t, s.Tenant).Data.Events
	front, _ := e.Queue.Offset(context.Background(), s.ID)

	res := e.doJSON(t, "DELETE", "/api/platform/members/external:"+ext, s.Token, nil)
	re := regexp.MustCompile(`^\{"data":\{"id":"([1-9][0-9]*)","member_id":"` + member + `","status":"pending","requested_at":"[^"]+\+00:00","completed_at":null,"events_deleted":null,"events_redacted":null\}\}$`)
	m := re.FindStringSubmatch(string(res.Body))
	if res.Status != 202 || m == nil {
		t.Fatalf("erase: %d %s", res.Status, res.Body)
	}
	erasureID := m[1]
	for _, ref := range []string{member, "external:" + ext} {
		assertBody(t, e.doJSON(t, "GET", "/api/platform/members/"+ref, s.Token, nil), 404, `{"message":"Not Found."}`)
	}
	assertBody(t, e.doJSON(t, "DELETE", "/api/platform/members/"+member, s.Token, nil), 404, `{"message":"Not Found."}`)
	if r := e.doJSON(t, "POST", "/api/platform/members", s.Token, map[string]any{"email": "new@example.com", "external_id": ext}); r.Status != 201 {
		t.Fatalf("the external id is not free: %d %s", r.Status, r.Body)
	}
	var gone models.AudienceMember
	testenv.Must(t, e.DB.Take(&gone, s.Member.ID).Error)
	if gone.Email != "" || gone.Name != "" || gone.ExternalID != nil || gone.ErasedAt == nil {
		t.Fatalf("personal fields kept: %+v", gone)
	}

	testenv.Must(t, e.Main.App.Erasures.Run(context.Background(), s.Tenant.ID, mustID(t, erasureID)))
	after := e.doJSON(t, "GET", "/api/platform/erasures/"+erasureID, s.Token, nil)
	if !strings.Contains(string(after.Body), `"status":"done"`) || !strings.Contains(string(after.Body), `"events_deleted":3,"events_redacted":3}}`) {
		t.Fatalf("erasure after the run: %d %s", after.Status, after.Body)
	}
	other := testenv.MustTenant(t, e.DB, false)
	assertBody(t, e.doJSON(t, "GET", "/api/platform/erasures/"+erasureID, other.Token, nil), 404, `{"message":"Not Found."}`)

	var left []models.TrackedEvent
	testenv.Must(t, e.DB.Where("tenant_id = ?", s.ID).Order("id").Find(&left).Error)
	if len(left) != 1 || left[0].ID != ids[3] {
		t.Fatalf("stored events left: %+v, want only the unrelated %s", left, ids[3])
	}
	now := e.MustRead(t, s.Tenant).Data.Events
	if front2, _ := e.Queue.Offset(context.Background(), s.ID); front2 != front || len(now) != len(before) {
		t.Fatalf("the queue moved: offset %d → %d, %d → %d events", front, front2, len(before), len(now))
	}
	for i := range now {
		b, a := before[i], now[i]
		if a.ID != b.ID || a.Type != b.Type || a.PageHostname != b.PageHostname || a.EventSequence != b.EventSequence || a.CreatedAt != b.CreatedAt {
			t.Fatalf("event %d changed what it keeps: %+v → %+v", i, b, a)
		}
		erased := b.SessionID == "s-a" || b.SessionID == "s-b"
		if blank := a.AudienceMemberID == nil && a.SessionID == "" && a.URL == "" && a.PagePath == "" && a.UserAgent == "" && a.IPAddress == ""; blank != erased {
			t.Fatalf("event %d (session %s): %+v", i, b.SessionID, a)
		}
	}
	// The lease taken before the erasure still acknowledges its (redacted) event, which trims it.
	if len(held.Data) != 1 || held.Data[0].Event.ID != ids[1] {
		t.Fatalf("leased before the erasure: %+v", held)
	}
	if st := e.mustAck(t, s.Tenant, map[string]any{"acks": leaseIDs(held)}); len(st) != 1 || st[0] != "acked" {
		t.Fatalf("ack after the erasure: %v", st)
	}
	if front2, _ := e.Queue.Offset(context.Background(), s.ID); front2 != front+1 {
		t.Fatalf("offset after the ack %d, want %d", front2, front+1)
	}
	dead := e.doJSON(t, "GET", "/api/platform/events/dead-letters", s.Token, nil)
	var letters struct {
		Data []struct {
			Event models.QueueEvent `json:"event"`
		} `json:"data"`
	}
	if json.Unmarshal(dead.Body, &letters) != nil || len(letters.Data) != 1 || letters.Data[0].Event.ID != ids[0] ||
		letters.Data[0].Event.SessionID != "" || letters.Data[0].Event.AudienceMemberID != nil {
		t.Fatalf("dead letters: %s", dead.Body)
	}
	var ent models.Entitlement
	testenv.Must(t, e.DB.Where("purchase_id = ?", p.ID).Take(&ent).Error)
	if ent.RevokedAt == nil || e.count(t, &models.Purchase{}, "id = ?", p.ID) != 1 {
		t.Fatalf("entitlement %+v, purchase kept: %d", ent, e.count(t, &models.Purchase{}, "id = ?", p.ID))
	}
	// Tracked after the erasure, naming the member by id: stored without it.
	late := e.MustTrack(t, s.Tenant, ev("s-late", &member))
	var row models.TrackedEvent
	testenv.Must(t, e.DB.Where("id = ?", late[0]).Take(&row).Error)
	if row.AudienceMemberID != nil {
		t.Fatalf("an event tracked after the erasure names the member: %v", *row.AudienceMemberID)
	}
}

func mustID(t *testing.T, s string) uint64 {
	t.Helper()
	id, ok := models.ParseID(s)
	if !ok {
		t.Fatalf("id %q", s)
	}
	return id
}
