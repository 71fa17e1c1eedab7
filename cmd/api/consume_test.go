package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/eventq/eventq/internal/clock"
	"github.com/eventq/eventq/internal/consume"
	"github.com/eventq/eventq/internal/eventstore"
	"github.com/eventq/eventq/internal/features"
	"github.com/eventq/eventq/internal/metrics"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/internal/tracking"
	"github.com/eventq/eventq/models"
)

// Offsets: a read says where its first event is; a trim with that offset is safe to retry,
// keeps events that arrived after the read, and an offset beyond the front is a 422.
func TestOffsetTrims(t *testing.T) {
	e := startAPI(t)
	tn := testenv.MustTenant(t, e.DB, true)
	ids := e.MustTrack(t, tn, pageView("s", 1), pageView("s", 2), pageView("s", 3))

	res := e.Do(t, "GET", "/api/platform/events?limit=2", tn.Token, nil)
	if res.Status != 200 || res.Header.Get("Queue-Offset") != "0" {
		t.Fatalf("GET: %d, Queue-Offset %q", res.Status, res.Header.Get("Queue-Offset"))
	}
	later := e.MustTrack(t, tn, pageView("s", 4))
	for attempt := range 3 { // a DELETE retried after a lost response
		res := e.Do(t, "DELETE", "/api/platform/events?count=2&offset=0", tn.Token, nil)
		if res.Status != 204 || res.Header.Get("Queue-Offset") != "2" || len(res.Body) != 0 {
			t.Fatalf("DELETE attempt %d: %d, Queue-Offset %q, body %q", attempt, res.Status, res.Header.Get("Queue-Offset"), res.Body)
		}
		if n := e.QueueLen(t, tn); n != 2 {
			t.Fatalf("attempt %d: queue length %d, want 2 (events 3 and 4)", attempt, n)
		}
	}
	got := e.MustRead(t, tn)
	if got.Data.Count != 2 || got.Data.Events[0].ID != ids[2] || got.Data.Events[1].ID != later[0] {
		t.Fatalf("left %+v", got.Data)
	}
	assertBody(t, e.Do(t, "DELETE", "/api/platform/events?count=1&offset=3", tn.Token, nil), 422,
		`{"message":"The offset field must not be greater than 2.","errors":{"offset":["The offset field must not be greater than 2."]}}`)
	if n := e.QueueLen(t, tn); n != 2 {
		t.Fatalf("queue length %d after a refused trim, want 2", n)
	}
	// Without an offset, DELETE keeps its original meaning, and reports the front.
	res = e.Do(t, "DELETE", "/api/platform/events?count=1", tn.Token, nil)
	if res.Status != 204 || res.Header.Get("Queue-Offset") != "3" {
		t.Fatalf("plain DELETE: %d, Queue-Offset %q", res.Status, res.Header.Get("Queue-Offset"))
	}
}

// Every new parameter is validated with Laravel's messages, and a refused request changes
// nothing.
func TestConsumptionParametersAreValidated(t *testing.T) {
	e := startAPI(t)
	tn := testenv.MustTenant(t, e.DB, true)
	e.MustTrack(t, tn, pageView("s", 1), pageView("s", 2))
	msg := func(field, text string) string {
		m := fmt.Sprintf("The %s field %s", field, text)
		return fmt.Sprintf(`{"message":%q,"errors":{%q:[%q]}}`, m, field, m)
	}
	for _, tc := range []struct{ method, query, body string }{
		{"GET", "?limit=abc", msg("limit", "must be an integer.")},
		{"GET", "?limit=1.5", msg("limit", "must be an integer.")},
		{"GET", "?limit=0", msg("limit", "must be at least 1.")},
		{"GET", "?limit=10001", msg("limit", "must not be greater than 10000.")},
		{"GET", "?wait=x", msg("wait", "must be an integer.")},
		{"GET", "?wait=-1", msg("wait", "must be at least 0.")},
		{"GET", "?wait=21", msg("wait", "must not be greater than 20.")},
		{"GET", "?limit=0&wait=21", `{"message":"The limit field must be at least 1. (and 1 more error)","errors":{"limit":["The limit field must be at least 1."],"wait":["The wait field must not be greater than 20."]}}`},
		{"DELETE", "?count=1&offset=-1", msg("offset", "must be at least 0.")},
		{"DELETE", "?count=1&offset=abc", msg("offset", "must be an integer.")},
		{"DELETE", "?count=1&offset=1&offset=9", msg("offset", "must not be greater than 0.")},
	} {
		t.Run(tc.method+tc.query, func(t *testing.T) {
			assertBody(t, e.Do(t, tc.method, "/api/platform/events"+tc.query, tn.Token, nil), 422, tc.body)
			if n := e.QueueLen(t, tn); n != 2 {
				t.Fatalf("queue length %d, want 2", n)
			}
		})
	}
	t.Run("limit bounds the read", func(t *testing.T) {
		res := e.Do(t, "GET", "/api/platform/events?limit=1", tn.Token, nil)
		if res.Status != 200 || !bytes.HasPrefix(res.Body, []byte(`{"data":{"count":1,"events":[{`)) {
			t.Fatalf("limit=1: %d %s", res.Status, res.Body)
		}
	})
}

// A read with wait on an empty queue is answered by a track on another api process, long
// before its wait is over; a wait with nothing arriving is answered empty when it is over.
func TestWaitIsWokenByATrackOnAnotherProcess(t *testing.T) {
	e := startAPI(t)
	other := startAPIOn(t, e.Redis, e.DB, e.Main.Config.DatabaseURL)
	tn := testenv.MustTenant(t, e.DB, true)

	type answer struct {
		res   *http.Response
		body  []byte
		at    time.Time
		error error
	}
	get := func(query string) <-chan answer {
		out := make(chan answer, 1)
		go func() {
			req, _ := http.NewRequest("GET", e.Base+"/api/platform/events"+query, nil)
			req.Header.Set("Authorization", "Bearer "+tn.Token)
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				out <- answer{error: err}
				return
			}
			b, err := io.ReadAll(res.Body)
			res.Body.Close()
			out <- answer{res: res, body: b, at: time.Now(), error: err}
		}()
		return out
	}

	start := time.Now()
	waiting := get("?wait=20")
	// Let the read reach its wait: it holds while the queue is empty.
	select {
	case a := <-waiting:
		t.Fatalf("read answered at once: %v %s", a.error, a.body)
	case <-time.After(300 * time.Millisecond):
	}
	ids := other.MustTrack(t, tn, pageView("s", 1))
	tracked := time.Now()
	var a answer
	select {
	case a = <-waiting:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting read was not woken by the track within 10 s")
	}
	if a.error != nil || a.res.StatusCode != 200 || !bytes.Contains(a.body, []byte(ids[0])) {
		t.Fatalf("woken read: %v %s", a.error, a.body)
	}
	if a.res.Header.Get("Queue-Offset") != "0" {
		t.Fatalf("Queue-Offset %q", a.res.Header.Get("Queue-Offset"))
	}
	t.Logf("answered %v after the track's 202, %v after the request", a.at.Sub(tracked), a.at.Sub(start))

	e.Do(t, "DELETE", "/api/platform/events?count=1&offset=0", tn.Token, nil)
	start = time.Now()
	a = <-get("?wait=1")
	if a.error != nil || string(a.body) != `{"data":{"count":0,"events":[]}}` || a.res.Header.Get("Queue-Offset") != "1" {
		t.Fatalf("empty wait: %v %s offset %q", a.error, a.body, a.res.Header.Get("Queue-Offset"))
	}
	if took := time.Since(start); took < time.Second {
		t.Fatalf("wait=1 answered after %v", took)
	}
	t.Run("a shutting-down api answers its waiting reads at once", func(t *testing.T) {
		waiting := get("?wait=20")
		time.Sleep(200 * time.Millisecond) // the read is waiting (a wait cannot be observed from outside)
		start := time.Now()
		e.Main.App.Waiter.Close()
		a := <-waiting
		if a.error != nil || a.res.StatusCode != 200 {
			t.Fatalf("%v %s", a.error, a.body)
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Fatalf("answered %v after the close", took)
		}
	})
}

// gzip and zstd reads decompress to the identity body; Vary says the body depends on it.
func TestCompressedReads(t *testing.T) {
	e := startAPI(t)
	tn := testenv.MustTenant(t, e.DB, true)
	for i := range 20 {
		e.MustTrack(t, tn, pageView("s", i), pageView("s", i+100))
	}
	identity := e.Do(t, "GET", "/api/platform/events", tn.Token, nil, "Accept-Encoding", "identity")
	if identity.Header.Get("Content-Encoding") != "" || identity.Header.Get("Vary") != "Accept-Encoding" {
		t.Fatalf("identity: Content-Encoding %q, Vary %q", identity.Header.Get("Content-Encoding"), identity.Header.Get("Vary"))
	}
	for _, tc := range []struct {
		accept, coding string
		decode         func([]byte) ([]byte, error)
	}{
		{"gzip", "gzip", gunzip},
		{"gzip, deflate, br, zstd", "zstd", unzstd},
		{"zstd;q=0, gzip;q=0.5", "gzip", gunzip},
		{"br", "", func(b []byte) ([]byte, error) { return b, nil }},
	} {
		t.Run(tc.accept, func(t *testing.T) {
			res := e.Do(t, "GET", "/api/platform/events", tn.Token, nil, "Accept-Encoding", tc.accept)
			if res.Status != 200 || res.Header.Get("Content-Encoding") != tc.coding || res.Header.Get("Queue-Offset") != "0" {
				t.Fatalf("%d, Content-Encoding %q, Queue-Offset %q", res.Status, res.Header.Get("Content-Encoding"), res.Header.Get("Queue-Offset"))
			}
			plain, err := tc.decode(res.Body)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(plain, identity.Body) {
				t.Fatalf("decoded body differs from the identity body:\n%s\n%s", plain, identity.Body)
			}
			if tc.coding != "" && len(res.Body) >= len(identity.Body) {
				t.Fatalf("%s body %d bytes, identity %d", tc.coding, len(res.Body), len(identity.Body))
			}
		})
	}
}

func gunzip(b []byte) ([]byte, error) {
	r, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	return io.ReadAll(r)
}

func unzstd(b []byte) ([]byte, error) {
	d, err := zstd.NewReader(nil)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return d.DecodeAll(b, nil)
}

// With the flag off, a read with wait is answered empty when the wait is over, without an
// offset.
func TestWaitWithTheFlagOff(t *testing.T) {
	e := startAPI(t)
	tn := testenv.MustTenant(t, e.DB, false)
	start := time.Now()
	res := e.Do(t, "GET", "/api/platform/events?wait=1", tn.Token, nil)
	assertBody(t, res, 200, `{"data":{"count":0,"events":[]}}`)
	if took := time.Since(start); took < time.Second {
		t.Fatalf("answered after %v", took)
	}
	if res.Header.Get("Queue-Offset") != "" {
		t.Fatalf("Queue-Offset %q with the flag off", res.Header.Get("Queue-Offset"))
	}
}

// After Redis restarts empty, a rebuild restores exactly the events the consumer had not
// trimmed, in order, from the offset the api recorded; a trim with an offset from before the
// loss beyond the restored front is refused.
func TestRebuildAfterAnEmptyRedisRestart(t *testing.T) {
	e := startAPI(t)
	tn := testenv.MustTenant(t, e.DB, true)
	var ids []string
	for i := range 5 {
		ids = append(ids, e.MustTrack(t, tn, pageView("s", 2*i), pageView("s", 2*i+1))...)
	}
	e.Do(t, "GET", "/api/platform/events?limit=4", tn.Token, nil)
	if res := e.Do(t, "DELETE", "/api/platform/events?count=4&offset=0", tn.Token, nil); res.Status != 204 {
		t.Fatalf("DELETE: %d", res.Status)
	}
	testenv.Eventually(t, 5*time.Second, "the api recorded the trim", func() bool {
		var f models.QueueFront
		return e.DB.Take(&f, "tenant_id = ?", tn.ID).Error == nil && f.Front == 4
	})
	testenv.Eventually(t, 5*time.Second, "no event is pending", func() bool {
		n, err := eventstore.New(e.DB).Count(context.Background(), 0)
		return err == nil && n == 0
	})
	e.Redis.Wipe()
	if n := e.QueueLen(t, tn); n != 0 {
		t.Fatalf("queue length %d after an empty restart", n)
	}
	in := tracking.NewIngestor(e.DB, features.New(e.DB, clock.Real{}), e.Queue, clock.Real{}, slog.New(slog.DiscardHandler), metrics.New())
	defer in.Close()
	restored, err := (&consume.Service{DB: e.DB, Events: in.Events(), Queue: e.Queue, Held: in.Delivery()}).Rebuild(context.Background(), tn.ID)
	if err != nil || restored[tn.ID] != 6 {
		t.Fatalf("rebuild: %v %v", restored, err)
	}
	res := e.Do(t, "GET", "/api/platform/events", tn.Token, nil)
	got := e.MustRead(t, tn)
	if res.Header.Get("Queue-Offset") != "4" || got.Data.Count != 6 {
		t.Fatalf("after the rebuild: offset %q, %d events", res.Header.Get("Queue-Offset"), got.Data.Count)
	}
	for i, ev := range got.Data.Events {
		if ev.ID != ids[4+i] {
			t.Fatalf("event %d is %s, want %s", i, ev.ID, ids[4+i])
		}
	}
	assertBody(t, e.Do(t, "DELETE", "/api/platform/events?count=2&offset=6", tn.Token, nil), 422,
		`{"message":"The offset field must not be greater than 4.","errors":{"offset":["The offset field must not be greater than 4."]}}`)
}
