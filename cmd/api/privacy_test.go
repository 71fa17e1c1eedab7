package main

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/eventq/eventq/internal/auth"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/models"
)

// With AnonymizeIp and redact_query_params, both track routes store and queue shortened
// addresses and redacted URLs, without fragments; a tenant without them keeps addresses and
// parameters (never the fragment).
func TestMinimisationAtIngestion(t *testing.T) {
	e := startAPI(t, "ADMIN_API_TOKENS="+adminToken, "TRUSTED_PROXIES=127.0.0.1")
	tn := testenv.MustTenant(t, e.DB, true)
	plain := testenv.MustTenant(t, e.DB, true)
	path := fmt.Sprintf("/api/admin/tenants/%d", tn.ID)
	var got tenantBody
	mustData(t, e.doJSON(t, "PATCH", path, adminToken, map[string]any{"redact_query_params": []string{"Email", "token"}}), 200, &got)
	mustData(t, e.doJSON(t, "PUT", path+"/features/AnonymizeIp", adminToken, map[string]any{"active": true}), 200, &struct{}{})
	const sent = "https://shop.example/a/b?email=ada%40x.io&ref=m&TOKEN=t#access_token=secret"
	const want = "https://shop.example/a/b?email=redacted&ref=m&TOKEN=redacted"
	event := func(session string) map[string]any {
		return map[string]any{"type": "page_view", "session_id": session, "url": sent, "event_sequence": 1}
	}
	track := func(tn testenv.Tenant, session, forwarded string) {
		body, _ := json.Marshal(map[string]any{"site_key": tn.SiteKey, "events": []any{event(session)}})
		if res := e.Do(t, "POST", "/api/track", "", body, "Content-Type", "application/json", "X-Forwarded-For", forwarded); res.Status != 202 {
			t.Fatalf("track: %d %s", res.Status, res.Body)
		}
	}
	// The settings reach the api within a second; track until they show.
	testenv.Eventually(t, 3*time.Second, "the tenant's settings apply", func() bool {
		track(tn, "probe", "203.0.113.7")
		var row models.TrackedEvent
		testenv.Must(t, e.DB.Where("tenant_id = ? AND session_id = ?", tn.ID, "probe").Order("id DESC").Take(&row).Error)
		return row.IPAddress == "203.0.113.0" && row.URL == want
	})
	track(tn, "v4", "203.0.113.7")
	track(tn, "v6", "2001:db8:1:2::7")
	platform := event("server")
	platform["ip_address"] = "2001:db8:abcd:12::1"
	if res := e.doJSON(t, "POST", "/api/platform/track", tn.Token, map[string]any{"events": []any{platform}}); res.Status != 202 {
		t.Fatalf("platform track: %d %s", res.Status, res.Body)
	}
	track(plain, "plain", "203.0.113.7")

	wantIP := map[string]string{"v4": "203.0.113.0", "v6": "2001:db8:1::", "server": "2001:db8:abcd::"}
	for session, ip := range wantIP {
		var row models.TrackedEvent
		testenv.Must(t, e.DB.Where("tenant_id = ? AND session_id = ?", tn.ID, session).Take(&row).Error)
		if row.IPAddress != ip || row.URL != want || row.PagePath != "/a/b" {
			t.Errorf("stored %s: ip %q url %q path %q, want %q and %q", session, row.IPAddress, row.URL, row.PagePath, ip, want)
		}
	}
	queued := map[string]models.QueueEvent{}
	for _, ev := range e.MustRead(t, tn).Data.Events {
		queued[ev.SessionID] = ev
	}
	for session, ip := range wantIP {
		if ev := queued[session]; ev.IPAddress != ip || ev.URL != want {
			t.Errorf("queued %s: %+v", session, ev)
		}
	}
	var row models.TrackedEvent
	testenv.Must(t, e.DB.Where("tenant_id = ?", plain.ID).Take(&row).Error)
	if row.IPAddress != "203.0.113.7" || row.URL != "https://shop.example/a/b?email=ada%40x.io&ref=m&TOKEN=t" {
		t.Errorf("a tenant without the settings: ip %q url %q (only the fragment dropped)", row.IPAddress, row.URL)
	}
}

// The access export: the member, its purchases, every entitlement it was granted (with when
// one ended) and the stored events naming it by id or external id, oldest first, as NDJSON,
// equal to the stored rows; another tenant's member is 404, and a token without events:read
// 403.
func TestAccessExportEqualsTheStoredRows(t *testing.T) {
	e := startAPI(t)
	s := testenv.MustShop(t, e.DB, "", true)
	ext := "site-9"
	testenv.Must(t, e.DB.Model(&s.Member).Update("external_id", ext).Error)
	p := models.Purchase{TenantID: s.ID, AudienceMemberID: s.Member.ID, ProductID: s.Product.ID, PSPCheckoutSessionID: "cs_access",
		AmountTotal: 1999, Currency: "usd", Status: models.PurchaseRefunded}
	testenv.Must(t, e.DB.Create(&p).Error)
	revoked := time.Now().UTC().Truncate(time.Second)
	ent := models.Entitlement{TenantID: s.ID, AudienceMemberID: s.Member.ID, ProductID: s.Product.ID, PurchaseID: p.ID, RevokedAt: &revoked}
	testenv.Must(t, e.DB.Create(&ent).Error)
	// A bare external id names no member: only "external:" + it does.
	byID, byExt, other, bare := models.FormatID(s.Member.ID), "external:"+ext, "someone-else", ext
	for i, who := range []*string{&byID, nil, &byExt, &other, &bare, &byID} {
		ev := pageView(fmt.Sprintf("s-%d", i), i)
		if who != nil {
			ev["audience_member_id"] = *who
		}
		e.MustTrack(t, s.Tenant, ev)
	}
	res := e.doJSON(t, "GET", "/api/platform/members/external:"+ext+"/data", s.Token, nil)
	if res.Status != 200 || res.Header.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("%d %s %s", res.Status, res.Header.Get("Content-Type"), res.Body)
	}
	var rows []models.TrackedEvent
	testenv.Must(t, e.DB.Where("tenant_id = ? AND audience_member_id IN ?", s.ID, []string{byID, byExt}).Order("created_at, id").Find(&rows).Error)
	if len(rows) != 3 {
		t.Fatalf("%d stored events of the member, want 3", len(rows))
	}
	var m models.AudienceMember
	testenv.Must(t, e.DB.Take(&m, s.Member.ID).Error)
	want := fmt.Sprintf(`{"kind":"member","data":{"id":"%d","external_id":"site-9","email":"%s","name":"Ada","created_at":"%s"}}`+"\n", m.ID, m.Email, models.FormatTime(m.CreatedAt)) +
		fmt.Sprintf(`{"kind":"purchase","data":{"id":"%d","audience_member_id":"%d","product_id":"%d","amount_total":1999,"currency":"usd","status":"refunded","created_at":"%s"}}`+"\n", p.ID, m.ID, s.Product.ID, models.FormatTime(p.CreatedAt)) +
		fmt.Sprintf(`{"kind":"entitlement","data":{"id":"%d","product_id":"%d","purchase_id":"%d","granted_at":"%s","revoked_at":"%s"}}`+"\n", ent.ID, s.Product.ID, p.ID, models.FormatTime(ent.CreatedAt), models.FormatTime(revoked))
	for i := range rows {
		want += `{"kind":"event","data":` + string(rows[i].MarshalQueue()) + "}\n"
	}
	if string(res.Body) != want {
		t.Fatalf("export:\n%s\nwant:\n%s", res.Body, want)
	}
	stranger := testenv.MustTenant(t, e.DB, false)
	assertBody(t, e.doJSON(t, "GET", "/api/platform/members/"+byID+"/data", stranger.Token, nil), 404, `{"message":"Not Found."}`)
	t.Run("members:read alone is not enough: the export holds events", func(t *testing.T) {
		_, readOnly, err := auth.CreateToken(context.Background(), e.DB, s.ID, "members", []string{auth.AbilityMembersRead}, nil)
		testenv.Must(t, err)
		assertBody(t, e.doJSON(t, "GET", "/api/platform/members/"+byID+"/data", readOnly, nil), 403, `{"message":"Invalid ability provided."}`)
		if res := e.doJSON(t, "GET", "/api/platform/members/"+byID, readOnly, nil); res.Status != 200 {
			t.Fatalf("the member itself: %d", res.Status)
		}
		_, both, err := auth.CreateToken(context.Background(), e.DB, s.ID, "export", []string{auth.AbilityMembersRead, auth.AbilityEventsRead}, nil)
		testenv.Must(t, err)
		if res := e.doJSON(t, "GET", "/api/platform/members/"+byID+"/data", both, nil); res.Status != 200 {
			t.Fatalf("members:read and events:read: %d %s", res.Status, res.Body)
		}
	})
}

// A tenant runs one access export at a time in an api process (each reads every stored event
// that may name the member): a second one meanwhile is 429 with Retry-After, another tenant's
// is served, and once the first ends the next is.
func TestAccessExportsOfATenantTakeTurns(t *testing.T) {
	e := startAPI(t)
	s, other := testenv.MustShop(t, e.DB, "", true), testenv.MustShop(t, e.DB, "", true)
	path := func(sh testenv.Shop) string {
		return "/api/platform/members/" + models.FormatID(sh.Member.ID) + "/data"
	}
	done, ok := e.Main.App.Export.Begin(s.ID) // an export of s under way
	if !ok {
		t.Fatal("no export should be running")
	}
	res := e.Do(t, "GET", path(s), s.Token, nil)
	if res.Status != 429 || string(res.Body) != `{"message":"Too Many Attempts."}` || res.Header.Get("Retry-After") != "1" {
		t.Fatalf("a second export of the tenant: %d %s %v", res.Status, res.Body, res.Header)
	}
	if res := e.Do(t, "GET", path(other), other.Token, nil); res.Status != 200 {
		t.Fatalf("another tenant's export: %d %s", res.Status, res.Body)
	}
	done()
	for range 2 { // each ends its turn
		if res := e.Do(t, "GET", path(s), s.Token, nil); res.Status != 200 {
			t.Fatalf("the export after the first ended: %d %s", res.Status, res.Body)
		}
	}
}
