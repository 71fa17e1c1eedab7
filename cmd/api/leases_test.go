package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/models"
)

// leaseBody is the POST /api/platform/events/leases answer.
type leaseBody struct {
	Data []struct {
		LeaseID    string            `json:"lease_id"`
		Offset     int64             `json:"offset"`
		Deliveries int64             `json:"deliveries"`
		Event      models.QueueEvent `json:"event"`
	} `json:"data"`
	ExpiresAt string `json:"expires_at"`
}

func (e *apiEnv) mustLease(t *testing.T, tn tenant, query string) leaseBody {
	t.Helper()
	res := e.Do(t, "POST", "/api/platform/events/leases"+query, tn.Token, nil)
	if res.Status != 200 {
		t.Fatalf("lease: %d %s", res.Status, res.Body)
	}
	var out leaseBody
	if err := json.Unmarshal(res.Body, &out); err != nil {
		t.Fatalf("decode %s: %v", res.Body, err)
	}
	if _, err := time.Parse(models.TimeFormat, out.ExpiresAt); err != nil || !strings.HasSuffix(out.ExpiresAt, "+00:00") {
		t.Fatalf("expires_at %q", out.ExpiresAt)
	}
	return out
}

func (e *apiEnv) mustAck(t *testing.T, tn tenant, body map[string]any) []string {
	t.Helper()
	b, _ := json.Marshal(body)
	res := e.Do(t, "POST", "/api/platform/events/acks", tn.Token, b, "Content-Type", "application/json")
	if res.Status != 200 {
		t.Fatalf("acks: %d %s", res.Status, res.Body)
	}
	var out struct {
		Data []struct {
			LeaseID string `json:"lease_id"`
			Status  string `json:"status"`
		} `json:"data"`
	}
	if err := json.Unmarshal(res.Body, &out); err != nil {
		t.Fatalf("decode %s: %v", res.Body, err)
	}
	var st []string
	for _, d := range out.Data {
		st = append(st, d.Status)
	}
	return st
}

func leaseIDs(b leaseBody) []string {
	var ids []string
	for _, d := range b.Data {
		ids = append(ids, d.LeaseID)
	}
	return ids
}

// Leases through the real api: events in order with their offsets, acks trimming the front
// (Queue-Offset advances), an acknowledged event behind an unacknowledged one stays, every
// status, redelivery after visibility, a plain DELETE ending leases, dead letters.
func TestLeasesAndAcks(t *testing.T) {
	e := startAPI(t, "EVENTQUEUE_MAX_DELIVERIES=2")
	tn := testenv.MustTenant(t, e.DB, true)
	ids := e.MustTrack(t, tn, pageView("s", 1), pageView("s", 2), pageView("s", 3), pageView("s", 4))

	a := e.mustLease(t, tn, "?limit=2&visibility=60")
	if len(a.Data) != 2 || a.Data[0].Offset != 0 || a.Data[1].Offset != 1 || a.Data[0].Event.ID != ids[0] || a.Data[0].Deliveries != 1 {
		t.Fatalf("first lease %+v", a)
	}
	// Leased events stay in the queue.
	if got := e.MustRead(t, tn); got.Data.Count != 4 {
		t.Fatalf("GET shows %d events while leased", got.Data.Count)
	}
	b := e.mustLease(t, tn, "?limit=2&visibility=1")
	if len(b.Data) != 2 || b.Data[0].Offset != 2 || b.Data[1].Offset != 3 {
		t.Fatalf("second lease %+v", b)
	}

	t.Run("an acknowledged event behind an unacknowledged one stays", func(t *testing.T) {
		st := e.mustAck(t, tn, map[string]any{"acks": []string{a.Data[1].LeaseID}})
		if !slices.Equal(st, []string{"acked"}) {
			t.Fatalf("statuses %v", st)
		}
		res := e.Do(t, "GET", "/api/platform/events", tn.Token, nil)
		if res.Header.Get("Queue-Offset") != "0" || e.QueueLen(t, tn) != 4 {
			t.Fatalf("Queue-Offset %q, length %d", res.Header.Get("Queue-Offset"), e.QueueLen(t, tn))
		}
	})
	t.Run("acknowledging the front trims it", func(t *testing.T) {
		st := e.mustAck(t, tn, map[string]any{"acks": []string{a.Data[0].LeaseID, a.Data[1].LeaseID, "bogus"}, "retries": []string{a.Data[0].LeaseID}})
		if !slices.Equal(st, []string{"acked", "already_acked", "unknown", "already_acked"}) {
			t.Fatalf("statuses %v", st)
		}
		res := e.Do(t, "GET", "/api/platform/events", tn.Token, nil)
		if res.Header.Get("Queue-Offset") != "2" || e.QueueLen(t, tn) != 2 {
			t.Fatalf("Queue-Offset %q, length %d", res.Header.Get("Queue-Offset"), e.QueueLen(t, tn))
		}
	})
	t.Run("an unacknowledged event comes back after its visibility", func(t *testing.T) {
		var again leaseBody
		testenv.Eventually(t, 5*time.Second, "offset 2 is leased again", func() bool {
			again = e.mustLease(t, tn, "?limit=1&visibility=60")
			return len(again.Data) == 1 && again.Data[0].Offset == 2
		})
		if again.Data[0].Deliveries != 2 {
			t.Fatalf("deliveries %d, want 2", again.Data[0].Deliveries)
		}
		st := e.mustAck(t, tn, map[string]any{"retries": []string{b.Data[0].LeaseID}, "extends": []string{b.Data[0].LeaseID, again.Data[0].LeaseID}, "visibility": 120})
		if !slices.Equal(st, []string{"expired", "expired", "extended"}) {
			t.Fatalf("statuses %v", st)
		}
		// Retried a second time: max deliveries (2) reached, so the next lease sends it to
		// the dead letters, counted as acknowledged: the front moves past it.
		st = e.mustAck(t, tn, map[string]any{"retries": []string{again.Data[0].LeaseID}})
		if !slices.Equal(st, []string{"retried"}) {
			t.Fatalf("statuses %v", st)
		}
		next := e.mustLease(t, tn, "?limit=5")
		if len(next.Data) != 1 || next.Data[0].Offset != 3 || next.Data[0].Event.ID != ids[3] || next.Data[0].Deliveries != 2 {
			t.Fatalf("lease after max deliveries %+v", next)
		}
		res := e.Do(t, "GET", "/api/platform/events", tn.Token, nil)
		if res.Header.Get("Queue-Offset") != "3" {
			t.Fatalf("Queue-Offset %q after the dead letter", res.Header.Get("Queue-Offset"))
		}
		st = e.mustAck(t, tn, map[string]any{"acks": []string{b.Data[0].LeaseID}})
		if !slices.Equal(st, []string{"trimmed"}) {
			t.Fatalf("ack of a dead event: %v", st)
		}
		dead := e.Do(t, "GET", "/api/platform/events/dead-letters?limit=10", tn.Token, nil)
		var body struct {
			Data []struct {
				Offset     int64             `json:"offset"`
				Deliveries int64             `json:"deliveries"`
				Event      models.QueueEvent `json:"event"`
			} `json:"data"`
		}
		if err := json.Unmarshal(dead.Body, &body); err != nil || len(body.Data) != 1 || body.Data[0].Offset != 2 || body.Data[0].Deliveries != 2 || body.Data[0].Event.ID != ids[2] {
			t.Fatalf("dead letters %d %s", dead.Status, dead.Body)
		}
		// A count past what a Lua number prints without an exponent drops them all (was 500).
		if res := e.Do(t, "DELETE", "/api/platform/events/dead-letters?count=100000000000000000", tn.Token, nil); res.Status != 204 {
			t.Fatalf("DELETE dead letters: %d %s", res.Status, res.Body)
		}
		if res := e.Do(t, "GET", "/api/platform/events/dead-letters", tn.Token, nil); string(res.Body) != `{"data":[]}` {
			t.Fatalf("dead letters after DELETE: %s", res.Body)
		}
		// A plain DELETE ends the lease of what it trims.
		if res := e.Do(t, "DELETE", "/api/platform/events?count=1", tn.Token, nil); res.Status != 204 || res.Header.Get("Queue-Offset") != "4" {
			t.Fatalf("DELETE: %d %q", res.Status, res.Header.Get("Queue-Offset"))
		}
		st = e.mustAck(t, tn, map[string]any{"acks": []string{next.Data[0].LeaseID}, "extends": []string{next.Data[0].LeaseID}})
		if !slices.Equal(st, []string{"trimmed", "trimmed"}) {
			t.Fatalf("after a plain DELETE: %v", st)
		}
	})
	t.Run("nothing available answers an empty list after wait", func(t *testing.T) {
		start := time.Now()
		if got := e.mustLease(t, tn, "?wait=1"); len(got.Data) != 0 {
			t.Fatalf("leased %+v of an empty queue", got.Data)
		}
		if time.Since(start) < 900*time.Millisecond {
			t.Fatalf("answered after %s, not after the wait", time.Since(start))
		}
	})
	t.Run("a waiting lease call gets an event tracked meanwhile", func(t *testing.T) {
		done := make(chan leaseBody, 1)
		go func() { done <- e.mustLease(t, tn, "?wait=10") }()
		time.Sleep(200 * time.Millisecond) // the call is waiting (an earlier track would only make the test pass sooner)
		id := e.MustTrack(t, tn, pageView("s", 5))[0]
		select {
		case got := <-done:
			if len(got.Data) != 1 || got.Data[0].Event.ID != id {
				t.Fatalf("leased %+v", got.Data)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the waiting lease call was not woken by the new event")
		}
	})
}

// Two api processes on one Redis answer one consumer's leases and acks alike, and concurrent
// consumers spread over both get disjoint events, every one exactly once.
func TestLeasesAcrossTwoAPIProcesses(t *testing.T) {
	db, dbURL := testenv.DB(t)
	r := testenv.StartRedis(t)
	one, two := startAPIOn(t, r, db, dbURL), startAPIOn(t, r, db, dbURL)
	tn := testenv.MustTenant(t, db, true)
	var events []map[string]any
	for i := range 90 {
		events = append(events, pageView("s", i))
	}
	ids := one.MustTrack(t, tn, events[:45]...)
	ids = append(ids, two.MustTrack(t, tn, events[45:]...)...)

	got := one.mustLease(t, tn, "?limit=3")
	if st := two.mustAck(t, tn, map[string]any{"extends": leaseIDs(got)}); !slices.Equal(st, []string{"extended", "extended", "extended"}) {
		t.Fatalf("extends through the other process: %v", st)
	}
	if st := two.mustAck(t, tn, map[string]any{"acks": leaseIDs(got)}); !slices.Equal(st, []string{"acked", "acked", "acked"}) {
		t.Fatalf("acks through the other process: %v", st)
	}

	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	for c := range 6 {
		api := []*apiEnv{one, two}[c%2]
		other := []*apiEnv{one, two}[(c+1)%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				b := api.mustLease(t, tn, "?limit=4&visibility=60")
				if len(b.Data) == 0 {
					return
				}
				mu.Lock()
				for _, d := range b.Data {
					seen[d.Event.ID]++
				}
				mu.Unlock()
				if st := other.mustAck(t, tn, map[string]any{"acks": leaseIDs(b)}); slices.ContainsFunc(st, func(s string) bool { return s != "acked" }) {
					t.Errorf("acks %v", st)
					return
				}
			}
		}()
	}
	wg.Wait()
	for _, id := range ids[3:] {
		if seen[id] != 1 {
			t.Fatalf("event %s leased %d times", id, seen[id])
		}
	}
	if len(seen) != len(ids)-3 {
		t.Fatalf("leased %d distinct events, want %d", len(seen), len(ids)-3)
	}
	res := one.Do(t, "GET", "/api/platform/events", tn.Token, nil)
	if res.Header.Get("Queue-Offset") != fmt.Sprint(len(ids)) || one.QueueLen(t, tn) != 0 {
		t.Fatalf("after every ack: Queue-Offset %q, length %d", res.Header.Get("Queue-Offset"), one.QueueLen(t, tn))
	}
}

// Every bad input is a 422 in Laravel's form on the field at fault, and changes nothing.
func TestLeaseAndAckValidation(t *testing.T) {
	e := startAPI(t)
	tn := testenv.MustTenant(t, e.DB, true)
	readOnly := testenv.MustTenant(t, e.DB, true, "events:read")
	deleteOnly := testenv.MustTenant(t, e.DB, true, "events:delete")
	both := testenv.MustTenant(t, e.DB, true, "events:read", "events:delete")
	e.MustTrack(t, tn, pageView("s", 1), pageView("s", 2))
	held := e.mustLease(t, tn, "?limit=1&visibility=600")
	tooMany := make([]string, 1001)
	for i := range tooMany {
		tooMany[i] = "x"
	}
	cases := []struct {
		name, method, path, body, want string
	}{
		{"limit zero", "POST", "/api/platform/events/leases?limit=0", "", `{"message":"The limit field must be at least 1.","errors":{"limit":["The limit field must be at least 1."]}}`},
		{"limit too large", "POST", "/api/platform/events/leases?limit=1001", "", `{"message":"The limit field must not be greater than 1000.","errors":{"limit":["The limit field must not be greater than 1000."]}}`},
		{"visibility not an integer", "POST", "/api/platform/events/leases?visibility=1.5", "", `{"message":"The visibility field must be an integer.","errors":{"visibility":["The visibility field must be an integer."]}}`},
		{"visibility too large", "POST", "/api/platform/events/leases?visibility=43201", "", `{"message":"The visibility field must not be greater than 43200.","errors":{"visibility":["The visibility field must not be greater than 43200."]}}`},
		{"wait too large and limit bad", "POST", "/api/platform/events/leases?wait=21&limit=x", "", `{"message":"The limit field must be an integer. (and 1 more error)","errors":{"limit":["The limit field must be an integer."],"wait":["The wait field must not be greater than 20."]}}`},
		{"acks not an array", "POST", "/api/platform/events/acks", `{"acks":"abc"}`, `{"message":"The acks field must be an array.","errors":{"acks":["The acks field must be an array."]}}`},
		{"a retry that is not a string", "POST", "/api/platform/events/acks", `{"retries":["` + held.Data[0].LeaseID + `",7]}`, `{"message":"The retries.1 field must be a string.","errors":{"retries.1":["The retries.1 field must be a string."]}}`},
		{"a lease id too long", "POST", "/api/platform/events/acks", `{"extends":["` + strings.Repeat("a", 129) + `"]}`, `{"message":"The extends.0 field must not be greater than 128 characters.","errors":{"extends.0":["The extends.0 field must not be greater than 128 characters."]}}`},
		{"visibility zero", "POST", "/api/platform/events/acks", `{"acks":["` + held.Data[0].LeaseID + `"],"visibility":0}`, `{"message":"The visibility field must be at least 1.","errors":{"visibility":["The visibility field must be at least 1."]}}`},
		{"visibility too large", "POST", "/api/platform/events/acks", `{"extends":["` + held.Data[0].LeaseID + `"],"visibility":43201}`, `{"message":"The visibility field must not be greater than 43200.","errors":{"visibility":["The visibility field must not be greater than 43200."]}}`},
		{"more than 1000 ids", "POST", "/api/platform/events/acks", `{"acks":["` + held.Data[0].LeaseID + `"],"retries":` + mustJSON(tooMany) + `}`, `{"message":"The retries field must not have more than 999 items.","errors":{"retries":["The retries field must not have more than 999 items."]}}`},
		{"dead letters limit", "GET", "/api/platform/events/dead-letters?limit=0", "", `{"message":"The limit field must be at least 1.","errors":{"limit":["The limit field must be at least 1."]}}`},
		{"dead letters count missing", "DELETE", "/api/platform/events/dead-letters", "", `{"message":"The count field is required.","errors":{"count":["The count field is required."]}}`},
		{"dead letters count zero", "DELETE", "/api/platform/events/dead-letters?count=0", "", `{"message":"The count field must be at least 1.","errors":{"count":["The count field must be at least 1."]}}`},
	}
	for _, c := range cases {
		t.Run("refuses "+c.name, func(t *testing.T) {
			res := e.Do(t, c.method, c.path, tn.Token, []byte(c.body), "Content-Type", "application/json")
			if res.Status != 422 || string(res.Body) != c.want {
				t.Fatalf("%d %s\nwant 422 %s", res.Status, res.Body, c.want)
			}
		})
	}
	t.Run("nothing changed", func(t *testing.T) {
		// The held lease is still live: the other event is the only one to lease, and the
		// held one extends.
		if st := e.mustAck(t, tn, map[string]any{"extends": []string{held.Data[0].LeaseID}}); !slices.Equal(st, []string{"extended"}) {
			t.Fatalf("the held lease: %v", st)
		}
		got := e.mustLease(t, tn, "?limit=10")
		if len(got.Data) != 1 || got.Data[0].Offset != 1 || e.QueueLen(t, tn) != 2 {
			t.Fatalf("after refused requests leased %+v, length %d", got.Data, e.QueueLen(t, tn))
		}
	})
	t.Run("abilities", func(t *testing.T) {
		if res := e.Do(t, "POST", "/api/platform/events/acks", readOnly.Token, []byte(`{}`)); res.Status != 403 || string(res.Body) != `{"message":"Invalid ability provided."}` {
			t.Fatalf("acks with events:read only: %d %s", res.Status, res.Body)
		}
		if res := e.Do(t, "DELETE", "/api/platform/events/dead-letters?count=1", readOnly.Token, nil); res.Status != 403 {
			t.Fatalf("DELETE dead letters with events:read only: %d %s", res.Status, res.Body)
		}
		// Leasing can send events to the dead letters, which a read-only token must not do.
		if res := e.Do(t, "POST", "/api/platform/events/leases?visibility=1", readOnly.Token, nil); res.Status != 403 || string(res.Body) != `{"message":"Invalid ability provided."}` {
			t.Fatalf("lease with events:read only: %d %s", res.Status, res.Body)
		}
		if res := e.Do(t, "POST", "/api/platform/events/leases", deleteOnly.Token, nil); res.Status != 403 {
			t.Fatalf("lease with events:delete only: %d %s", res.Status, res.Body)
		}
		if res := e.Do(t, "POST", "/api/platform/events/leases", both.Token, nil); res.Status != 200 {
			t.Fatalf("lease with events:read and events:delete: %d %s", res.Status, res.Body)
		}
		if res := e.Do(t, "POST", "/api/platform/events/leases", "", nil); res.Status != 401 {
			t.Fatalf("lease without a token: %d", res.Status)
		}
	})
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
