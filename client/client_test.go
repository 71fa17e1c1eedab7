package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/eventq/eventq/internal/testenv"
)

func TestReadAndTrim(t *testing.T) {
	e := startAPI(t)
	tn := testenv.MustTenant(t, e.DB, true)
	ctx := context.Background()
	member := "m-42"
	ids, err := e.Track(tn, pageView("s-1", 0), map[string]any{
		"type": "signup", "session_id": "s-1", "url": "https://shop.example/join", "event_sequence": 1, "audience_member_id": member,
	}, pageView("s-1", 2))
	if err != nil {
		t.Fatal(err)
	}
	c := New(e.Base+"/", tn.Token) // a trailing slash is fine

	t.Run("reads the events as served, without removing them", func(t *testing.T) {
		served := e.RawRead(t, tn)
		b, err := c.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if b.Count != 3 || len(b.Events) != 3 {
			t.Fatalf("count %d, %d events; want 3", b.Count, len(b.Events))
		}
		raws := make([][]byte, len(b.Events))
		for i, ev := range b.Events {
			raws[i] = ev.Raw
			if ev.ID != ids[i] {
				t.Errorf("event %d: id %s, want %s", i, ev.ID, ids[i])
			}
		}
		rebuilt := `{"data":{"count":3,"events":[` + string(bytes.Join(raws, []byte(","))) + `]}}`
		if rebuilt != string(served) {
			t.Errorf("Raw does not reproduce the served body:\n got %s\nwant %s", rebuilt, served)
		}
		if again := e.RawRead(t, tn); !bytes.Equal(again, served) {
			t.Errorf("the read removed something: %s", again)
		}
	})

	t.Run("decodes every field", func(t *testing.T) {
		b, err := c.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ev := b.Events[1]
		if ev.Type != "signup" || ev.SessionID != "s-1" || ev.URL != "https://shop.example/join" ||
			ev.PageHostname != "shop.example" || ev.PagePath != "/join" || ev.UserAgent != "Mozilla/5.0 (client test)" ||
			ev.IPAddress != "127.0.0.1" || ev.EventSequence != 1 {
			t.Errorf("decoded %+v", ev)
		}
		if ev.AudienceMemberID == nil || *ev.AudienceMemberID != member || b.Events[0].AudienceMemberID != nil {
			t.Errorf("audience_member_id: %v and %v", b.Events[0].AudienceMemberID, ev.AudienceMemberID)
		}
		var wire struct {
			CreatedAt string `json:"created_at"`
		}
		json.Unmarshal(ev.Raw, &wire)
		if ev.CreatedAt.IsZero() || ev.CreatedAt.Format(TimeFormat) != wire.CreatedAt {
			t.Errorf("created_at %s decoded as %v", wire.CreatedAt, ev.CreatedAt)
		}
		if d := time.Since(ev.CreatedAt); d < 0 || d > time.Minute {
			t.Errorf("created_at %v is not about now", ev.CreatedAt)
		}
		for _, ev := range b.Events { // the wire shape round-trips for events eventq served
			var buf bytes.Buffer
			enc := json.NewEncoder(&buf)
			enc.SetEscapeHTML(false)
			enc.Encode(ev)
			if got := bytes.TrimSuffix(buf.Bytes(), []byte("\n")); !bytes.Equal(got, ev.Raw) {
				t.Errorf("MarshalJSON %s\n       Raw %s", got, ev.Raw)
			}
		}
	})

	t.Run("trims exactly count events from the front", func(t *testing.T) {
		if err := c.Trim(ctx, 2); err != nil {
			t.Fatal(err)
		}
		b, err := c.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if b.Count != 1 || b.Events[0].ID != ids[2] || e.QueueLen(t, tn) != 1 {
			t.Fatalf("after trim 2: %+v, queue length %d", b, e.QueueLen(t, tn))
		}
	})

	t.Run("reads an empty queue as count 0 and no events", func(t *testing.T) {
		if err := c.Trim(ctx, 1); err != nil {
			t.Fatal(err)
		}
		b, err := c.Read(ctx)
		if err != nil || b.Count != 0 || b.Events == nil || len(b.Events) != 0 {
			t.Fatalf("got %+v, %v; want count 0 and an empty, non-nil slice", b, err)
		}
	})

	t.Run("reads nothing while UseQueueEvents is off", func(t *testing.T) {
		off := testenv.MustTenant(t, e.DB, false)
		e.MustTrack(t, off, "s-off", 2)
		b, err := New(e.Base, off.Token).Read(ctx)
		if err != nil || b.Count != 0 {
			t.Fatalf("got %+v, %v", b, err)
		}
	})

	t.Run("refuses a count below 1 without a request", func(t *testing.T) {
		p := newProxy(t, e.Base, nil)
		pc := New(p.URL, tn.Token)
		for _, n := range []int{0, -1} {
			if err := pc.Trim(ctx, n); err == nil || !strings.Contains(err.Error(), "at least 1") {
				t.Errorf("Trim(%d) = %v", n, err)
			}
		}
		if got := p.Requests(); len(got) != 0 {
			t.Errorf("requests sent: %v", got)
		}
	})
}

func TestErrors(t *testing.T) {
	e := startAPI(t)
	ctx := context.Background()

	t.Run("bad token is a permanent 401", func(t *testing.T) {
		_, err := New(e.Base, "999999|not-a-token").Read(ctx)
		ae, ok := errors.AsType[*APIError](err)
		if !ok || ae.Status != 401 || ae.Message != "Unauthenticated." || IsTransient(err) {
			t.Fatalf("got %v (transient %v)", err, IsTransient(err))
		}
		if err.Error() != "read events: HTTP 401: Unauthenticated." {
			t.Errorf("message %q", err.Error())
		}
	})

	t.Run("token without events:delete gets a permanent 403 on trim", func(t *testing.T) {
		tn := testenv.MustTenant(t, e.DB, true, "events:read")
		err := New(e.Base, tn.Token).Trim(ctx, 1)
		ae, ok := errors.AsType[*APIError](err)
		if !ok || ae.Status != 403 || ae.Message != "Invalid ability provided." || IsTransient(err) {
			t.Fatalf("got %v", err)
		}
	})

	t.Run("validation error carries the field errors", func(t *testing.T) {
		tn := testenv.MustTenant(t, e.DB, true)
		c := New(e.Base, tn.Token)
		_, _, err := c.do(ctx, "DELETE", eventsPath+"?count=abc", http.StatusNoContent)
		ae, ok := errors.AsType[*APIError](err)
		if !ok || ae.Status != 422 || ae.Message != "The count field must be an integer." ||
			len(ae.Errors["count"]) != 1 || IsTransient(err) {
			t.Fatalf("got %#v", err)
		}
	})

	t.Run("connection refused is transient", func(t *testing.T) {
		_, err := New(fmt.Sprintf("http://127.0.0.1:%d", testenv.FreePort(t)), "1|x").Read(ctx)
		if _, ok := errors.AsType[*NetworkError](err); !ok || !IsTransient(err) {
			t.Fatalf("got %#v (transient %v)", err, IsTransient(err))
		}
	})

	t.Run("cancelled context is not transient", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		_, err := New(e.Base, "1|x").Read(cctx)
		if err == nil || !errors.Is(err, context.Canceled) || IsTransient(err) {
			t.Fatalf("got %v (transient %v)", err, IsTransient(err))
		}
	})

	t.Run("a body that is not the read result is a permanent error", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprint(w, `<html>login</html>`)
		}))
		defer srv.Close()
		_, err := New(srv.URL, "1|x").Read(ctx)
		if err == nil || IsTransient(err) {
			t.Fatalf("got %v", err)
		}
	})

	t.Run("statuses", func(t *testing.T) {
		for status, transient := range map[int]bool{408: true, 429: true, 500: true, 502: true, 503: true, 504: true,
			400: false, 401: false, 403: false, 404: false, 405: false, 413: false, 422: false} {
			if got := IsTransient(fmt.Errorf("op: %w", &APIError{Status: status})); got != transient {
				t.Errorf("IsTransient(%d) = %v", status, got)
			}
		}
		if IsTransient(nil) || IsTransient(errors.New("other")) {
			t.Error("nil or an unknown error is transient")
		}
	})
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Duration{
		"7": 7 * time.Second, " 120 ": 2 * time.Minute, "0": 0, "-3": 0, "": 0, "soon": 0,
		"Sat, 21 Nov 2026 10:00:30 GMT": 30 * time.Second, "Sat, 21 Nov 2026 09:00:00 GMT": 0,
	} {
		if got := parseRetryAfter(in, now); got != want {
			t.Errorf("parseRetryAfter(%q) = %v, want %v", in, got, want)
		}
	}
}

func TestBackoff(t *testing.T) {
	ms := time.Millisecond
	t.Run("doubles up to the cap, at the top of the jitter range", func(t *testing.T) {
		b := backoff{min: 200 * ms, max: 2 * time.Second, jitter: func(n time.Duration) time.Duration { return n - 1 }}
		var got []time.Duration
		for range 7 {
			got = append(got, b.next())
		}
		want := []time.Duration{200 * ms, 400 * ms, 800 * ms, 1600 * ms, 2000 * ms, 2000 * ms, 2000 * ms}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("got %v, want %v", got, want)
		}
		b.reset()
		if d := b.next(); d != 200*ms {
			t.Fatalf("after reset %v", d)
		}
	})
	t.Run("never waits less than half", func(t *testing.T) {
		b := backoff{min: 200 * ms, max: 10 * time.Second, jitter: func(time.Duration) time.Duration { return 0 }}
		if d1, d2 := b.next(), b.next(); d1 != 100*ms || d2 != 200*ms {
			t.Fatalf("got %v %v", d1, d2)
		}
	})
	t.Run("real jitter stays in range and does not overflow", func(t *testing.T) {
		c := New("http://x", "t", WithBackoff(time.Nanosecond, time.Hour))
		b := backoff{min: c.minBackoff, max: c.maxBackoff, jitter: c.jitter}
		for i := range 200 {
			want := min(time.Duration(1)<<min(i, 62), time.Hour)
			if d := b.next(); d < want-want/2 || d > want {
				t.Fatalf("wait %d: %v outside [%v, %v]", i, d, want-want/2, want)
			}
		}
	})
	t.Run("options", func(t *testing.T) {
		if c := New("x", "t"); c.minBackoff != DefaultMinBackoff || c.maxBackoff != DefaultMaxBackoff || c.http.Timeout != DefaultTimeout {
			t.Errorf("defaults %v %v %v", c.minBackoff, c.maxBackoff, c.http.Timeout)
		}
		if c := New("x", "t", WithBackoff(time.Second, time.Millisecond)); c.maxBackoff != time.Second {
			t.Errorf("max below min: %v", c.maxBackoff)
		}
	})
}

// An event names its member by eventq's id or by "external:" + the site's own id; anything
// else names nobody.
func TestEventMember(t *testing.T) {
	for raw, want := range map[string][3]any{
		"42":              {"42", "", true},
		"external:user-1": {"", "user-1", true},
		"external:42":     {"", "42", true},
		"user-1":          {"", "", false},
		"042":             {"", "", false},
		"external:":       {"", "", false},
		"":                {"", "", false},
	} {
		v := raw
		id, ext, ok := Event{AudienceMemberID: &v}.Member()
		if id != want[0] || ext != want[1] || ok != want[2] {
			t.Errorf("Member() of %q = %q %q %v, want %v", raw, id, ext, ok, want)
		}
	}
	if _, _, ok := (Event{}).Member(); ok {
		t.Error("an event without a member names one")
	}
}
