package main

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/eventq/eventq/models"
)

var queueEventKeys = []string{"id", "type", "session_id", "audience_member_id", "url", "page_hostname",
	"page_path", "user_agent", "ip_address", "event_sequence", "created_at"}

// insertEvent stores a tracked event of tenantID created at at, with id n.
func (e *cliEnv) insertEvent(t *testing.T, tenantID string, n int, at time.Time, member *string) models.TrackedEvent {
	t.Helper()
	tid, ok := models.ParseID(tenantID)
	if !ok {
		t.Fatalf("bad tenant id %q", tenantID)
	}
	ev := models.TrackedEvent{
		ID:               fmt.Sprintf("0193a5b0-0000-7000-8000-%012d", n),
		TenantID:         tid,
		Type:             "page_view",
		SessionID:        "s-" + strconv.Itoa(n),
		AudienceMemberID: member,
		URL:              fmt.Sprintf("https://shop.example/a/%d?x=1&y=<2>", n),
		PageHostname:     "shop.example",
		PagePath:         fmt.Sprintf("/a/%d", n),
		UserAgent:        "Mozilla/5.0 (X11; Linux x86_64)",
		IPAddress:        "203.0.113.7",
		EventSequence:    int64(n),
		CreatedAt:        at,
	}
	if err := e.db.Create(&ev).Error; err != nil {
		t.Fatalf("insert event: %v", err)
	}
	return ev
}

func TestEventsList(t *testing.T) {
	t.Run("prints an empty array for a tenant without events", func(t *testing.T) {
		e := newCLI(t)
		tenant := e.mustTenant(t, "Acme")
		if raw := e.MustRun(t, "events", "list", "--tenant", tenant); string(raw) != "[]" {
			t.Errorf("stdout %s, want []", raw)
		}
	})

	t.Run("prints the tenant's events newest last", func(t *testing.T) {
		e := newCLI(t)
		tenant := e.mustTenant(t, "Acme")
		other := e.mustTenant(t, "Other")
		base := time.Date(2026, 11, 21, 10, 15, 30, 0, time.UTC)
		member := "42"
		// Inserted out of order; the ids of 1-3 sort by time.
		e.insertEvent(t, tenant, 2, base.Add(2*time.Second), nil)
		e.insertEvent(t, tenant, 3, base.Add(3*time.Second), &member)
		e.insertEvent(t, tenant, 1, base.Add(1*time.Second), nil)
		e.insertEvent(t, other, 9, base.Add(9*time.Second), nil)

		items := e.MustArray(t, queueEventKeys, "events", "list", "--tenant", tenant)
		if len(items) != 3 {
			t.Fatalf("%d events, want 3: %v", len(items), items)
		}
		for i, it := range items {
			n := i + 1
			want := map[string]any{
				"id":                 fmt.Sprintf("0193a5b0-0000-7000-8000-%012d", n),
				"type":               "page_view",
				"session_id":         "s-" + strconv.Itoa(n),
				"audience_member_id": nil,
				"url":                fmt.Sprintf("https://shop.example/a/%d?x=1&y=<2>", n),
				"page_hostname":      "shop.example",
				"page_path":          fmt.Sprintf("/a/%d", n),
				"user_agent":         "Mozilla/5.0 (X11; Linux x86_64)",
				"ip_address":         "203.0.113.7",
				"event_sequence":     float64(n),
				"created_at":         fmt.Sprintf("2026-11-21T10:15:3%d+00:00", n),
			}
			if n == 3 {
				want["audience_member_id"] = "42"
			}
			for k, v := range want {
				if it[k] != v {
					t.Errorf("event %d: %s = %#v, want %#v", n, k, it[k], v)
				}
			}
		}
	})

	t.Run("prints URLs without HTML escaping and null members", func(t *testing.T) {
		e := newCLI(t)
		tenant := e.mustTenant(t, "Acme")
		e.insertEvent(t, tenant, 1, time.Date(2026, 11, 21, 10, 15, 31, 0, time.UTC), nil)
		raw := e.MustRun(t, "events", "list", "--tenant", tenant)
		want := `[{"id":"0193a5b0-0000-7000-8000-000000000001","type":"page_view","session_id":"s-1",` +
			`"audience_member_id":null,"url":"https://shop.example/a/1?x=1&y=<2>","page_hostname":"shop.example",` +
			`"page_path":"/a/1","user_agent":"Mozilla/5.0 (X11; Linux x86_64)","ip_address":"203.0.113.7",` +
			`"event_sequence":1,"created_at":"2026-11-21T10:15:31+00:00"}]`
		if string(raw) != want {
			t.Errorf("stdout\n%s\nwant\n%s", raw, want)
		}
	})

	t.Run("prints created_at in UTC with a numeric offset", func(t *testing.T) {
		e := newCLI(t)
		tenant := e.mustTenant(t, "Acme")
		e.insertEvent(t, tenant, 1, time.Date(2026, 11, 21, 12, 0, 0, 0, time.FixedZone("CEST", 2*3600)), nil)
		items := e.MustArray(t, queueEventKeys, "events", "list", "--tenant", tenant)
		if len(items) != 1 || items[0]["created_at"] != "2026-11-21T10:00:00+00:00" {
			t.Errorf("events = %v, want one created at 2026-11-21T10:00:00+00:00", items)
		}
	})

	t.Run("keeps the newest events within --limit", func(t *testing.T) {
		e := newCLI(t)
		tenant := e.mustTenant(t, "Acme")
		base := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
		for _, n := range []int{4, 1, 5, 3, 2} {
			e.insertEvent(t, tenant, n, base.Add(time.Duration(n)*time.Minute), nil)
		}
		for _, tc := range []struct {
			limit string
			want  []string
		}{
			{"1", []string{"s-5"}},
			{"2", []string{"s-4", "s-5"}},
			{"5", []string{"s-1", "s-2", "s-3", "s-4", "s-5"}},
			{"10000", []string{"s-1", "s-2", "s-3", "s-4", "s-5"}},
		} {
			items := e.MustArray(t, queueEventKeys, "events", "list", "--tenant", tenant, "--limit", tc.limit)
			var got []string
			for _, it := range items {
				got = append(got, str(t, it, "session_id"))
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("--limit %s: sessions %v, want %v", tc.limit, got, tc.want)
			}
		}
	})

	t.Run("orders events created at the same time by id", func(t *testing.T) {
		e := newCLI(t)
		tenant := e.mustTenant(t, "Acme")
		at := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
		for _, n := range []int{2, 3, 1} {
			e.insertEvent(t, tenant, n, at, nil)
		}
		raw := e.MustRun(t, "events", "list", "--tenant", tenant, "--limit", "2")
		var items []struct{ ID string }
		if err := json.Unmarshal(raw, &items); err != nil {
			t.Fatal(err)
		}
		if len(items) != 2 || items[0].ID >= items[1].ID || items[1].ID != "0193a5b0-0000-7000-8000-000000000003" {
			t.Errorf("events %s, want ids ...002 then ...003", raw)
		}
	})

	t.Run("fails on a bad --limit", func(t *testing.T) {
		e := newCLI(t)
		tenant := e.mustTenant(t, "Acme")
		for _, limit := range []string{"0", "-1", "10001", "ten"} {
			stderr := e.MustFail(t, "events", "list", "--tenant", tenant, "--limit="+limit)
			if !regexp.MustCompile(`limit`).MatchString(stderr) {
				t.Errorf("--limit %s: stderr %q does not mention --limit", limit, stderr)
			}
		}
	})

	t.Run("fails for an unknown tenant", func(t *testing.T) {
		e := newCLI(t)
		e.MustFail(t, "events", "list", "--tenant", "999999")
		e.MustFail(t, "events", "list")
	})
}
