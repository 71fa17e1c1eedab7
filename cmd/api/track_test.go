package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/eventq/eventq/internal/clock"
	"github.com/eventq/eventq/internal/delivery"
	"github.com/eventq/eventq/internal/eventstore"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/internal/tracking"
	"github.com/eventq/eventq/jobs"
)

func TestTrackRejectsBadInput(t *testing.T) {
	e := startAPI(t)
	tn := testenv.MustTenant(t, e.DB, true)
	ok := func(over map[string]any) string {
		ev := pageView("s-1", 1)
		for k, v := range over {
			if v == nil {
				delete(ev, k)
			} else {
				ev[k] = v
			}
		}
		b, _ := json.Marshal(map[string]any{"site_key": tn.SiteKey, "events": []any{ev}})
		return string(b)
	}
	hundredOne := make([]any, 101)
	for i := range hundredOne {
		hundredOne[i] = pageView("s", i)
	}
	tooMany, _ := json.Marshal(map[string]any{"site_key": tn.SiteKey, "events": hundredOne})
	one := func(field, msg string) string {
		return fmt.Sprintf(`{"message":%q,"errors":{%q:[%q]}}`, msg, field, msg)
	}

	for _, tc := range []struct{ name, body, want string }{
		{"malformed JSON", `{"site_key":`,
			`{"message":"The site key field is required. (and 1 more error)","errors":{"site_key":["The site key field is required."],"events":["The events field is required."]}}`},
		{"a JSON array", `[1,2]`,
			`{"message":"The site key field is required. (and 1 more error)","errors":{"site_key":["The site key field is required."],"events":["The events field is required."]}}`},
		{"no events", fmt.Sprintf(`{"site_key":%q,"events":[]}`, tn.SiteKey), one("events", "The events field is required.")},
		{"events not a list", fmt.Sprintf(`{"site_key":%q,"events":"x"}`, tn.SiteKey), one("events", "The events field must be an array.")},
		{"101 events", string(tooMany), one("events", "The events field must not have more than 100 items.")},
		{"site key not a string", `{"site_key":5,"events":[{"type":"page_view","session_id":"s","url":"https://a.example/","event_sequence":1}]}`,
			one("site_key", "The site key field must be a string.")},
		{"missing type", ok(map[string]any{"type": nil}), one("events.0.type", "The events.0.type field is required.")},
		{"type with capitals", ok(map[string]any{"type": "PageView"}), one("events.0.type", "The events.0.type field format is invalid.")},
		{"type too long", ok(map[string]any{"type": strings.Repeat("a", 65)}), one("events.0.type", "The events.0.type field must not be greater than 64 characters.")},
		{"type not a string", ok(map[string]any{"type": 7}), one("events.0.type", "The events.0.type field must be a string.")},
		{"missing session", ok(map[string]any{"session_id": nil}), one("events.0.session_id", "The events.0.session id field is required.")},
		{"session too long", ok(map[string]any{"session_id": strings.Repeat("s", 129)}), one("events.0.session_id", "The events.0.session id field must not be greater than 128 characters.")},
		{"missing url", ok(map[string]any{"url": nil}), one("events.0.url", "The events.0.url field is required.")},
		{"relative url", ok(map[string]any{"url": "/a/b"}), one("events.0.url", "The events.0.url field must be a valid URL.")},
		{"ftp url", ok(map[string]any{"url": "ftp://a.example/x"}), one("events.0.url", "The events.0.url field must be a valid URL.")},
		{"url too long", ok(map[string]any{"url": "https://a.example/" + strings.Repeat("x", 2048)}), one("events.0.url", "The events.0.url field must not be greater than 2048 characters.")},
		{"missing sequence", ok(map[string]any{"event_sequence": nil}), one("events.0.event_sequence", "The events.0.event sequence field is required.")},
		{"negative sequence", ok(map[string]any{"event_sequence": -1}), one("events.0.event_sequence", "The events.0.event sequence field must be at least 0.")},
		{"fractional sequence", ok(map[string]any{"event_sequence": 1.5}), one("events.0.event_sequence", "The events.0.event sequence field must be an integer.")},
		{"member id not a string", ok(map[string]any{"audience_member_id": 12}), one("events.0.audience_member_id", "The events.0.audience member id field must be a string.")},
		{"event not an object", fmt.Sprintf(`{"site_key":%q,"events":[5]}`, tn.SiteKey),
			`{"message":"The events.0.type field is required. (and 3 more errors)","errors":{"events.0.type":["The events.0.type field is required."],"events.0.session_id":["The events.0.session id field is required."],"events.0.url":["The events.0.url field is required."],"events.0.event_sequence":["The events.0.event sequence field is required."]}}`},
	} {
		t.Run("422 for "+tc.name, func(t *testing.T) {
			assertBody(t, e.Do(t, "POST", "/api/track", "", []byte(tc.body)), 422, tc.want)
			if rows, n := e.EventRows(t, tn), e.QueueLen(t, tn); rows != 0 || n != 0 {
				t.Fatalf("rejected request left %d rows and %d queued", rows, n)
			}
		})
	}

	t.Run("413 for a body over 64 KiB", func(t *testing.T) {
		big := ok(map[string]any{"session_id": strings.Repeat("s", 70000)})
		assertBody(t, e.Do(t, "POST", "/api/track", "", []byte(big)), 413, `{"message":"Content Too Large."}`)
		if rows := e.EventRows(t, tn); rows != 0 {
			t.Fatalf("%d rows", rows)
		}
	})
	t.Run("401 for an unknown site key", func(t *testing.T) {
		body := strings.Replace(ok(nil), tn.SiteKey, "site_nope", 1)
		assertBody(t, e.Do(t, "POST", "/api/track", "", []byte(body)), 401, `{"message":"Unauthenticated."}`)
	})
	t.Run("202 for the same body once valid, with any content type", func(t *testing.T) {
		res := e.Do(t, "POST", "/api/track", "", []byte(ok(nil)), "Content-Type", "text/plain;charset=UTF-8")
		if res.Status != 202 || e.EventRows(t, tn) != 1 || e.QueueLen(t, tn) != 1 {
			t.Fatalf("%d %s", res.Status, res.Body)
		}
	})
}

func TestTrackAnswersCORS(t *testing.T) {
	e := startAPI(t)
	res := e.Do(t, "OPTIONS", "/api/track", "", nil, "Origin", "https://blog.example",
		"Access-Control-Request-Method", "POST", "Access-Control-Request-Headers", "content-type")
	if res.Status != 204 || res.Header.Get("Access-Control-Allow-Origin") != "*" {
		t.Fatalf("preflight: %d %v", res.Status, res.Header)
	}
	tn := testenv.MustTenant(t, e.DB, false)
	body, _ := json.Marshal(map[string]any{"site_key": tn.SiteKey, "events": []any{pageView("s", 1)}})
	res = e.Do(t, "POST", "/api/track", "", body, "Origin", "https://blog.example")
	if res.Status != 202 || res.Header.Get("Access-Control-Allow-Origin") != "*" {
		t.Fatalf("POST: %d %v", res.Status, res.Header)
	}
}

func TestClientAddressAndPlatformTrack(t *testing.T) {
	e := startAPI(t, "TRUSTED_PROXIES=127.0.0.1")
	tn := testenv.MustTenant(t, e.DB, true)
	body, _ := json.Marshal(map[string]any{"site_key": tn.SiteKey, "events": []any{pageView("s", 1)}})

	t.Run("X-Forwarded-For from a trusted proxy names the client", func(t *testing.T) {
		e.Do(t, "POST", "/api/track", "", body, "X-Forwarded-For", "198.51.100.9, 127.0.0.1")
		if got := e.MustRead(t, tn).Data.Events[0].IPAddress; got != "198.51.100.9" {
			t.Fatalf("ip %q", got)
		}
	})
	t.Run("platform track takes user agent and ip from the event", func(t *testing.T) {
		ev := pageView("srv", 9)
		ev["user_agent"], ev["ip_address"], ev["audience_member_id"] = "Server/1.0", "2001:db8::1", "m-42"
		b, _ := json.Marshal(map[string]any{"events": []any{ev}})
		res := e.Do(t, "POST", "/api/platform/track", tn.Token, b)
		if res.Status != 202 {
			t.Fatalf("%d %s", res.Status, res.Body)
		}
		got := e.MustRead(t, tn).Data.Events[1]
		if got.UserAgent != "Server/1.0" || got.IPAddress != "2001:db8::1" || got.AudienceMemberID == nil || *got.AudienceMemberID != "m-42" {
			t.Fatalf("%+v", got)
		}
	})
	t.Run("platform track validates ip_address", func(t *testing.T) {
		ev := pageView("srv", 9)
		ev["ip_address"] = "999.1.1.1"
		b, _ := json.Marshal(map[string]any{"events": []any{ev}})
		assertBody(t, e.Do(t, "POST", "/api/platform/track", tn.Token, b), 422,
			`{"message":"The events.0.ip address field must be a valid IP address.","errors":{"events.0.ip_address":["The events.0.ip address field must be a valid IP address."]}}`)
	})
	t.Run("platform track needs events:write", func(t *testing.T) {
		reader := testenv.MustTenant(t, e.DB, true, "events:read")
		b, _ := json.Marshal(map[string]any{"events": []any{pageView("s", 1)}})
		assertBody(t, e.Do(t, "POST", "/api/platform/track", reader.Token, b), 403, `{"message":"Invalid ability provided."}`)
		if rows := e.EventRows(t, reader); rows != 0 {
			t.Fatalf("%d rows", rows)
		}
	})
}

// Redis is down when an event is tracked: the request still succeeds (the event is committed)
// and the worker's requeue job pushes it once Redis is back.
func TestEventTrackedWhileRedisIsDownReachesTheQueueLater(t *testing.T) {
	e := startAPI(t)
	tn := testenv.MustTenant(t, e.DB, true)
	e.MustTrack(t, tn, pageView("s", 1)) // warms the flag cache while Redis is up

	e.Redis.Stop()
	ids := e.MustTrack(t, tn, pageView("s", 2), pageView("s", 3))
	e.Redis.Start()

	// The first event's pending batch is deleted shortly after its push; the two others stay
	// pending.
	testenv.Eventually(t, 5*time.Second, "exactly the two late events are pending", func() bool {
		pending, err := eventstore.New(e.DB).Count(context.Background(), 0)
		return err == nil && pending == 2
	})

	fake := clock.NewFake(time.Now())
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ingest := tracking.NewIngestor(e.DB, e.Main.App.Flags, e.Queue, fake, log, nil)
	t.Cleanup(ingest.Close)
	h := &jobs.Handlers{Delivery: ingest.Delivery(), Log: log}

	t.Run("not before the minimum age", func(t *testing.T) {
		if err := h.RequeueEvents(context.Background(), jobs.NewRequeueEventsTask()); err != nil {
			t.Fatal(err)
		}
		if n := e.QueueLen(t, tn); n != 1 {
			t.Fatalf("queue length %d, want 1", n)
		}
	})
	t.Run("pushed once old enough, exactly once", func(t *testing.T) {
		fake.Advance(delivery.RequeueMinAge + time.Second)
		for i := 0; i < 2; i++ {
			if err := h.RequeueEvents(context.Background(), jobs.NewRequeueEventsTask()); err != nil {
				t.Fatal(err)
			}
		}
		got := e.MustRead(t, tn)
		if got.Data.Count != 3 || got.Data.Events[1].ID != ids[0] || got.Data.Events[2].ID != ids[1] {
			t.Fatalf("queue %+v, want the two late events after the first", got.Data.Events)
		}
	})
}

func TestReadiness(t *testing.T) {
	e := startAPI(t)
	if res := e.Do(t, "GET", "/healthz", "", nil); res.Status != 200 {
		t.Fatalf("healthz %d", res.Status)
	}
	if res := e.Do(t, "GET", "/readyz", "", nil); res.Status != 200 {
		t.Fatalf("readyz %d %s", res.Status, res.Body)
	}
	e.Redis.Stop()
	res := e.Do(t, "GET", "/readyz", "", nil)
	if res.Status != 503 || !strings.Contains(string(res.Body), `"redis":"unreachable"`) {
		t.Fatalf("readyz with Redis down: %d %s", res.Status, res.Body)
	}
	if res := e.Do(t, "GET", "/healthz", "", nil); res.Status != 200 {
		t.Fatalf("healthz %d", res.Status)
	}
}
