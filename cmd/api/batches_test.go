package main

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/models"
)

// batchIDOf is the batch_id of a lease answer, checked against the contract's bounds.
func (e *apiEnv) leaseBatch(t *testing.T, tn tenant, query string) (leaseBody, string) {
	t.Helper()
	res := e.Do(t, "POST", "/api/platform/events/leases"+query, tn.Token, nil)
	var out struct {
		leaseBody
		BatchID *string `json:"batch_id"`
	}
	if err := json.Unmarshal(res.Body, &out); err != nil || res.Status != 200 || out.BatchID == nil || *out.BatchID == "" || len(*out.BatchID) > 128 {
		t.Fatalf("lease: %d %s (%v)", res.Status, res.Body, err)
	}
	return out.leaseBody, *out.BatchID
}

// ackBody posts body to the acks route and returns the answer, which must be 200.
func (e *apiEnv) ackBody(t *testing.T, tn tenant, body string) string {
	t.Helper()
	res := e.Do(t, "POST", "/api/platform/events/acks", tn.Token, []byte(body), "Content-Type", "application/json")
	if res.Status != 200 {
		t.Fatalf("acks %s: %d %s", body, res.Status, res.Body)
	}
	return string(res.Body)
}

// Batch acks through the real api, byte for byte: a batch id acknowledges every event of its
// lease call not yet acknowledged, new or leased again, after its expiry too, skipping the
// trimmed ones, after the per-id entries; the front is trimmed.
func TestBatchAcksThroughTheAPI(t *testing.T) {
	e := startAPI(t)
	tn := testenv.MustTenant(t, e.DB, true)
	e.MustTrack(t, tn, pageView("s", 1), pageView("s", 2), pageView("s", 3), pageView("s", 4), pageView("s", 5))

	a, aID := e.leaseBatch(t, tn, "?limit=2&visibility=1")
	b, bID := e.leaseBatch(t, tn, "?limit=2&visibility=60")
	if aID == bID {
		t.Fatalf("two lease calls answered the batch id %q", aID)
	}
	expires, _ := time.Parse(models.TimeFormat, a.ExpiresAt)
	testenv.Eventually(t, 5*time.Second, "the first batch's lease runs out", func() bool {
		return time.Now().After(expires.Add(time.Second + 50*time.Millisecond)) // expires_at is in whole seconds
	})
	c, cID := e.leaseBatch(t, tn, "?limit=5&visibility=60") // offsets 0 and 1 again, and 4
	if len(c.Data) != 3 || c.Data[0].Deliveries != 2 || c.Data[2].Offset != 4 {
		t.Fatalf("leased again: %+v", c.Data)
	}

	got := e.ackBody(t, tn, fmt.Sprintf(`{"batches":[%q,%q],"acks":[%q]}`, cID, aID, b.Data[0].LeaseID))
	want := fmt.Sprintf(`{"data":[{"lease_id":%q,"status":"acked"},{"batch_id":%q,"status":"acked","acked":3},{"batch_id":%q,"status":"acked","acked":0}]}`,
		b.Data[0].LeaseID, cID, aID)
	if got != want {
		t.Fatalf("acks answered\n%s\nwant\n%s", got, want)
	}
	res := e.Do(t, "GET", "/api/platform/events", tn.Token, nil)
	if res.Header.Get("Queue-Offset") != "3" || e.QueueLen(t, tn) != 2 {
		t.Fatalf("Queue-Offset %q, length %d; want 3 and 2 (offset 3 is not acknowledged)", res.Header.Get("Queue-Offset"), e.QueueLen(t, tn))
	}
	// A plain DELETE trims what is left: the batch acknowledges nothing more.
	if res := e.Do(t, "DELETE", "/api/platform/events?count=2", tn.Token, nil); res.Status != 204 {
		t.Fatalf("DELETE: %d %s", res.Status, res.Body)
	}
	got = e.ackBody(t, tn, fmt.Sprintf(`{"batches":[%q,"nonsense",%q]}`, bID, bID))
	want = fmt.Sprintf(`{"data":[{"batch_id":%q,"status":"acked","acked":0},{"batch_id":"nonsense","status":"unknown"},{"batch_id":%q,"status":"acked","acked":0}]}`, bID, bID)
	if got != want {
		t.Fatalf("acks answered\n%s\nwant\n%s", got, want)
	}

	t.Run("an empty lease answer has a batch id too", func(t *testing.T) {
		empty, id := e.leaseBatch(t, tn, "")
		if len(empty.Data) != 0 {
			t.Fatalf("leased %+v", empty.Data)
		}
		if got := e.ackBody(t, tn, fmt.Sprintf(`{"batches":[%q]}`, id)); got != fmt.Sprintf(`{"data":[{"batch_id":%q,"status":"acked","acked":0}]}`, id) {
			t.Fatalf("acks answered %s", got)
		}
	})
	t.Run("a tenant whose events are not queued", func(t *testing.T) {
		off := testenv.MustTenant(t, e.DB, false)
		_, id := e.leaseBatch(t, off, "")
		if got := e.ackBody(t, off, fmt.Sprintf(`{"batches":[%q]}`, id)); got != fmt.Sprintf(`{"data":[{"batch_id":%q,"status":"unknown"}]}`, id) {
			t.Fatalf("acks answered %s", got)
		}
		if got := e.ackBody(t, off, fmt.Sprintf(`{"batches":[%q]}`, bID)); got != fmt.Sprintf(`{"data":[{"batch_id":%q,"status":"unknown"}]}`, bID) {
			t.Fatalf("another tenant's batch answered %s", got)
		}
	})
}

// A body with batches that is not the contract's shape is 422 on the field at fault, and
// changes nothing.
func TestBatchAckValidation(t *testing.T) {
	e := startAPI(t)
	tn := testenv.MustTenant(t, e.DB, true)
	e.MustTrack(t, tn, pageView("s", 1), pageView("s", 2))
	held, id := e.leaseBatch(t, tn, "?limit=2&visibility=600")
	many := make([]string, 1000)
	for i := range many {
		many[i] = id
	}
	cases := []struct{ name, body, want string }{
		{"batches not an array", `{"batches":"` + id + `"}`, `{"message":"The batches field must be an array.","errors":{"batches":["The batches field must be an array."]}}`},
		{"a batch id that is not a string", `{"batches":["` + id + `",{}]}`, `{"message":"The batches.1 field must be a string.","errors":{"batches.1":["The batches.1 field must be a string."]}}`},
		{"an empty batch id", `{"batches":[""]}`, `{"message":"The batches.0 field is required.","errors":{"batches.0":["The batches.0 field is required."]}}`},
		{"a batch id too long", `{"batches":["` + strings.Repeat("b", 129) + `"]}`, `{"message":"The batches.0 field must not be greater than 128 characters.","errors":{"batches.0":["The batches.0 field must not be greater than 128 characters."]}}`},
		{"batch ids counted with lease ids", `{"acks":["` + held.Data[0].LeaseID + `"],"batches":` + mustJSON(many) + `}`, `{"message":"The batches field must not have more than 999 items.","errors":{"batches":["The batches field must not have more than 999 items."]}}`},
		{"a good batch beside a bad visibility", `{"batches":["` + id + `"],"visibility":"x"}`, `{"message":"The visibility field must be an integer.","errors":{"visibility":["The visibility field must be an integer."]}}`},
	}
	for _, c := range cases {
		t.Run("refuses "+c.name, func(t *testing.T) {
			res := e.Do(t, "POST", "/api/platform/events/acks", tn.Token, []byte(c.body), "Content-Type", "application/json")
			if res.Status != 422 || string(res.Body) != c.want {
				t.Fatalf("%d %s\nwant 422 %s", res.Status, res.Body, c.want)
			}
		})
	}
	t.Run("nothing changed", func(t *testing.T) {
		if e.QueueLen(t, tn) != 2 {
			t.Fatalf("length %d", e.QueueLen(t, tn))
		}
		got := e.ackBody(t, tn, mustJSON(map[string]any{"batches": many[:999]}))
		if !regexp.MustCompile(`^\{"data":\[\{"batch_id":"[^"]+","status":"acked","acked":2\}(,\{"batch_id":"[^"]+","status":"acked","acked":0\}){998}\]\}$`).MatchString(got) {
			t.Fatalf("999 batch ids answered %.300s", got)
		}
		if e.QueueLen(t, tn) != 0 {
			t.Fatalf("length %d after the batch ack", e.QueueLen(t, tn))
		}
	})
}
