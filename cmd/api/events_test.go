package main

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eventq/eventq/internal/eventqueue/queuetest"

	"github.com/eventq/eventq/internal/testenv"
)

func TestQuickStartFlow(t *testing.T) {
	e := startAPI(t)
	tn := testenv.MustTenant(t, e.DB, true)

	ids := e.MustTrack(t, tn, pageView("s-1", 1), pageView("s-1", 2))
	got := e.MustRead(t, tn)
	if got.Data.Count != 2 || got.Data.Events[0].ID != ids[0] || got.Data.Events[1].ID != ids[1] {
		t.Fatalf("read %+v, want ids %v in order", got.Data, ids)
	}
	ev := got.Data.Events[0]
	if ev.Type != "page_view" || ev.SessionID != "s-1" || ev.AudienceMemberID != nil ||
		ev.URL != "https://shop.example/a/b?x=1" || ev.PageHostname != "shop.example" ||
		ev.PagePath != "/a/b" || ev.UserAgent != "Mozilla/5.0 (test)" || ev.IPAddress != "127.0.0.1" ||
		ev.EventSequence != 1 {
		t.Fatalf("unexpected event %+v", ev)
	}
	if !regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00$`).MatchString(ev.CreatedAt) {
		t.Fatalf("created_at %q is not ISO 8601 with a numeric offset", ev.CreatedAt)
	}

	t.Run("read is repeatable", func(t *testing.T) {
		if again := e.MustRead(t, tn); again.Data.Count != 2 {
			t.Fatalf("second read count %d, want 2", again.Data.Count)
		}
	})
	t.Run("every key is present, audience_member_id as null", func(t *testing.T) {
		res := e.Do(t, "GET", "/api/platform/events", tn.Token, nil)
		for _, key := range []string{"id", "type", "session_id", "audience_member_id", "url", "page_hostname",
			"page_path", "user_agent", "ip_address", "event_sequence", "created_at"} {
			if !strings.Contains(string(res.Body), `"`+key+`":`) {
				t.Fatalf("key %s missing in %s", key, res.Body)
			}
		}
		if !strings.Contains(string(res.Body), `"audience_member_id":null`) {
			t.Fatalf("audience_member_id not null in %s", res.Body)
		}
		if ct := res.Header.Get("Content-Type"); ct != "application/json" {
			t.Fatalf("content type %q", ct)
		}
	})
	t.Run("trim removes exactly count", func(t *testing.T) {
		res := e.Do(t, "DELETE", "/api/platform/events?count=1", tn.Token, nil)
		if res.Status != 204 || len(res.Body) != 0 {
			t.Fatalf("DELETE: %d %q", res.Status, res.Body)
		}
		left := e.MustRead(t, tn)
		if left.Data.Count != 1 || left.Data.Events[0].ID != ids[1] {
			t.Fatalf("after trim %+v, want only %s", left.Data, ids[1])
		}
	})
	t.Run("empty queue reads as the empty result", func(t *testing.T) {
		e.Do(t, "DELETE", "/api/platform/events?count=5", tn.Token, nil)
		assertBody(t, e.Do(t, "GET", "/api/platform/events", tn.Token, nil), 200, `{"data":{"count":0,"events":[]}}`)
	})
	t.Run("every event is also in the database", func(t *testing.T) {
		if n := e.EventRows(t, tn); n != 2 {
			t.Fatalf("%d rows, want 2", n)
		}
	})
}

func TestTrimRejectsInvalidCount(t *testing.T) {
	e := startAPI(t)
	tn := testenv.MustTenant(t, e.DB, true)
	e.MustTrack(t, tn, pageView("s", 1), pageView("s", 2), pageView("s", 3))

	required := `{"message":"The count field is required.","errors":{"count":["The count field is required."]}}`
	integer := `{"message":"The count field must be an integer.","errors":{"count":["The count field must be an integer."]}}`
	atLeast := `{"message":"The count field must be at least 1.","errors":{"count":["The count field must be at least 1."]}}`
	for _, tc := range []struct{ name, query, body string }{
		{"missing", "", required},
		{"empty", "?count=", required},
		{"blank", "?count=%20%20", required},
		{"other parameter only", "?n=2", required},
		{"not a number", "?count=abc", integer},
		{"decimal", "?count=1.5", integer},
		{"exponent", "?count=1e3", integer},
		{"hex", "?count=0x10", integer},
		{"beyond int64", "?count=99999999999999999999", integer},
		{"zero", "?count=0", atLeast},
		{"negative", "?count=-1", atLeast},
	} {
		t.Run("422 when count is "+tc.name, func(t *testing.T) {
			assertBody(t, e.Do(t, "DELETE", "/api/platform/events"+tc.query, tn.Token, nil), 422, tc.body)
			if n := e.QueueLen(t, tn); n != 3 {
				t.Fatalf("queue length %d after rejected trim, want 3", n)
			}
		})
	}
}

func TestEventsRouteRejectsOtherMethods(t *testing.T) {
	e := startAPI(t)
	tn := testenv.MustTenant(t, e.DB, true)
	e.MustTrack(t, tn, pageView("s", 1))
	for _, method := range []string{"PUT", "PATCH", "POST"} {
		t.Run(method+" answers 405 with Allow", func(t *testing.T) {
			res := e.Do(t, method, "/api/platform/events?count=1", tn.Token, nil)
			assertBody(t, res, 405, `{"message":"Method Not Allowed."}`)
			allow := res.Header.Get("Allow")
			for _, m := range []string{"GET", "HEAD", "DELETE"} {
				if !strings.Contains(allow, m) {
					t.Fatalf("Allow %q lacks %s", allow, m)
				}
			}
			if n := e.QueueLen(t, tn); n != 1 {
				t.Fatalf("queue length %d, want 1", n)
			}
		})
	}
	t.Run("unknown path answers 404", func(t *testing.T) {
		assertBody(t, e.Do(t, "GET", "/api/platform/nope", tn.Token, nil), 404, `{"message":"Not Found."}`)
	})
}

func TestFlagInactive(t *testing.T) {
	e := startAPI(t)
	tn := testenv.MustTenant(t, e.DB, false)
	// Events that are somehow in the list must neither be shown nor trimmed.
	if err := queuetest.Append(context.Background(), e.Redis.Client(), tn.ID, []byte(`{"id":"x"}`), []byte(`{"id":"y"}`)); err != nil {
		t.Fatal(err)
	}

	t.Run("track stores the event but does not queue it", func(t *testing.T) {
		e.MustTrack(t, tn, pageView("s", 1))
		if n := e.EventRows(t, tn); n != 1 {
			t.Fatalf("%d rows, want 1", n)
		}
		if n := e.QueueLen(t, tn); n != 2 {
			t.Fatalf("queue length %d, want 2", n)
		}
	})
	t.Run("DELETE is a 204 no-op", func(t *testing.T) {
		res := e.Do(t, "DELETE", "/api/platform/events?count=2", tn.Token, nil)
		if res.Status != 204 {
			t.Fatalf("DELETE: %d %s", res.Status, res.Body)
		}
		if n := e.QueueLen(t, tn); n != 2 {
			t.Fatalf("queue length %d, want 2", n)
		}
	})
	t.Run("DELETE still validates count", func(t *testing.T) {
		if res := e.Do(t, "DELETE", "/api/platform/events?count=0", tn.Token, nil); res.Status != 422 {
			t.Fatalf("DELETE count=0: %d", res.Status)
		}
	})
	t.Run("GET answers the empty result without touching Redis", func(t *testing.T) {
		e.Redis.Stop()
		defer e.Redis.Start()
		assertBody(t, e.Do(t, "GET", "/api/platform/events", tn.Token, nil), 200, `{"data":{"count":0,"events":[]}}`)
	})
}

func TestTrimKeepsEventsThatArrivedAfterTheRead(t *testing.T) {
	e := startAPI(t)
	tn := testenv.MustTenant(t, e.DB, true)
	e.MustTrack(t, tn, pageView("s", 1), pageView("s", 2))
	read := e.MustRead(t, tn)
	later := e.MustTrack(t, tn, pageView("s", 3))
	e.Do(t, "DELETE", fmt.Sprintf("/api/platform/events?count=%d", read.Data.Count), tn.Token, nil)
	left := e.MustRead(t, tn)
	if left.Data.Count != 1 || left.Data.Events[0].ID != later[0] {
		t.Fatalf("after trim %+v, want only the later event %s", left.Data, later[0])
	}
}

func TestReadReturnsAtMost10000(t *testing.T) {
	e := startAPI(t)
	tn := testenv.MustTenant(t, e.DB, true)
	batch := make([][]byte, 10050)
	for i := range batch {
		batch[i] = []byte(fmt.Sprintf(`{"id":"%05d","type":"page_view","session_id":"s","audience_member_id":null,"url":"https://shop.example/","page_hostname":"shop.example","page_path":"/","user_agent":"","ip_address":"","event_sequence":%d,"created_at":"2026-11-21T10:15:30+00:00"}`, i, i))
	}
	if err := queuetest.Append(context.Background(), e.Redis.Client(), tn.ID, batch...); err != nil {
		t.Fatal(err)
	}
	got := e.MustRead(t, tn)
	if got.Data.Count != 10000 || got.Data.Events[0].ID != "00000" || got.Data.Events[9999].ID != "09999" {
		t.Fatalf("count %d, first %s", got.Data.Count, got.Data.Events[0].ID)
	}
	e.Do(t, "DELETE", "/api/platform/events?count=10000", tn.Token, nil)
	if rest := e.MustRead(t, tn); rest.Data.Count != 50 || rest.Data.Events[0].ID != "10000" {
		t.Fatalf("after trim: count %d", rest.Data.Count)
	}
}

func TestTenantsAreIsolated(t *testing.T) {
	e := startAPI(t)
	a, b := testenv.MustTenant(t, e.DB, true), testenv.MustTenant(t, e.DB, true)
	e.MustTrack(t, a, pageView("a", 1))
	if got := e.MustRead(t, b); got.Data.Count != 0 {
		t.Fatalf("tenant b sees %d events of tenant a", got.Data.Count)
	}
	e.Do(t, "DELETE", "/api/platform/events?count=1", b.Token, nil)
	if n := e.QueueLen(t, a); n != 1 {
		t.Fatalf("tenant b's trim changed tenant a's queue: %d", n)
	}
}

// Several producers post while one consumer runs the basic consumer loop (read, process, trim the
// count read): every event is seen exactly once, and each producer's events in its order.
func TestConcurrentProducersAndConsumerSeeEveryEventOnce(t *testing.T) {
	e := startAPI(t)
	tn := testenv.MustTenant(t, e.DB, true)
	const producers, requests, perRequest = 4, 25, 4
	total := producers * requests * perRequest

	var wg sync.WaitGroup
	sent := make([][]string, producers)
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			for r := 0; r < requests; r++ {
				evs := make([]map[string]any, perRequest)
				for i := range evs {
					evs[i] = pageView(fmt.Sprintf("p%d", p), r*perRequest+i)
				}
				sent[p] = append(sent[p], e.MustTrack(t, tn, evs...)...)
			}
		}(p)
	}

	seen := map[string]int{}
	var order []string
	deadline := time.Now().Add(60 * time.Second)
	for len(order) < total {
		if time.Now().After(deadline) {
			t.Fatalf("consumer saw %d of %d events", len(order), total)
		}
		got := e.MustRead(t, tn)
		if got.Data.Count == 0 {
			time.Sleep(5 * time.Millisecond) // the consumer's back-off, not synchronisation
			continue
		}
		for _, ev := range got.Data.Events {
			seen[ev.ID]++
			order = append(order, ev.ID)
		}
		if res := e.Do(t, "DELETE", fmt.Sprintf("/api/platform/events?count=%d", got.Data.Count), tn.Token, nil); res.Status != 204 {
			t.Fatalf("DELETE: %d %s", res.Status, res.Body)
		}
	}
	wg.Wait()
	if n := e.QueueLen(t, tn); n != 0 {
		t.Fatalf("%d events left in the queue", n)
	}
	for p := range sent {
		for _, id := range sent[p] {
			if seen[id] != 1 {
				t.Fatalf("event %s seen %d times", id, seen[id])
			}
		}
	}
	pos := map[string]int{}
	for i, id := range order {
		pos[id] = i
	}
	for p := range sent {
		for i := 1; i < len(sent[p]); i++ {
			if pos[sent[p][i-1]] > pos[sent[p][i]] {
				t.Fatalf("producer %d's events out of order", p)
			}
		}
	}
}

// QUEUE_PAGE_MAX_BYTES bounds a page and a lease answer by the bytes of their events: fewer
// than limit when the events are large, at least one, Queue-Offset as usual.
func TestPagesAndLeasesAreBoundedByBytes(t *testing.T) {
	e := startAPI(t, "QUEUE_PAGE_MAX_BYTES=10000")
	tn := testenv.MustTenant(t, e.DB, true)
	events := make([]map[string]any, 9)
	for i := range events {
		events[i] = pageView("s", 10+i)
		events[i]["url"] = "https://shop.example/" + strings.Repeat("p", 1500)
	}
	ids := e.MustTrack(t, tn, events...)
	one := e.Do(t, "GET", "/api/platform/events?limit=1", tn.Token, nil)
	var first struct {
		Data struct {
			Events []json.RawMessage `json:"events"`
		} `json:"data"`
	}
	if err := json.Unmarshal(one.Body, &first); err != nil || len(first.Data.Events) != 1 {
		t.Fatalf("%d %s", one.Status, one.Body)
	}
	size := len(first.Data.Events[0]) // every event is as long: same lengths of every field
	fit := (10000 + 1) / (size + 1)
	if fit < 2 || fit >= 9 {
		t.Fatalf("events of %d bytes: %d fit, want a test with 2 to 8", size, fit)
	}
	res := e.Do(t, "GET", "/api/platform/events?limit=100", tn.Token, nil)
	var page readResult
	if err := json.Unmarshal(res.Body, &page); err != nil || page.Data.Count != fit || len(page.Data.Events) != fit ||
		page.Data.Events[0].ID != ids[0] || res.Header.Get("Queue-Offset") != "0" {
		t.Fatalf("page of %d-byte events under 10000 bytes: %d %s..., want %d events", size, res.Status, res.Body[:min(len(res.Body), 200)], fit)
	}
	leased := e.mustLease(t, tn, "?limit=100")
	if len(leased.Data) != fit || leased.Data[0].Offset != 0 {
		t.Fatalf("leased %d events, want %d", len(leased.Data), fit)
	}
	if again := e.mustLease(t, tn, "?limit=100"); len(again.Data) != fit || again.Data[0].Offset != int64(fit) {
		t.Fatalf("second lease: %d events from %d, want %d from %d", len(again.Data), again.Data[0].Offset, fit, fit)
	}
	// Nothing is lost: trimming page by page visits every event once, in order.
	var seen []string
	for range 9 {
		got := e.MustRead(t, tn)
		if got.Data.Count == 0 {
			break
		}
		for _, ev := range got.Data.Events {
			seen = append(seen, ev.ID)
		}
		if r := e.Do(t, "DELETE", fmt.Sprintf("/api/platform/events?count=%d", got.Data.Count), tn.Token, nil); r.Status != 204 {
			t.Fatalf("trim: %d %s", r.Status, r.Body)
		}
	}
	if !slices.Equal(seen, ids) {
		t.Fatalf("read %v, want %v", seen, ids)
	}
}
