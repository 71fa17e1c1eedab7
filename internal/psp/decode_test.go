package psp_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v76"

	"github.com/eventq/eventq/internal/psp"
)

// TestDecodeEventReadsWhatStripeGoReads checks DecodeEvent against stripe-go's decoding: the
// same id, type, account, creation time and data.object bytes for an event, and an error for
// every payload stripe-go cannot decode.
func TestDecodeEventReadsWhatStripeGoReads(t *testing.T) {
	_, payload := psp.NewEvent(stripe.EventTypeCheckoutSessionCompleted, "acct_1", psp.SessionObject{ID: "cs_1", Metadata: map[string]string{"a": "b"}}, time.Now())
	var want stripe.Event
	if err := json.Unmarshal(payload, &want); err != nil {
		t.Fatal(err)
	}
	got, err := psp.DecodeEvent(payload)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != want.ID || got.Type != want.Type || got.Account != want.Account || got.Created != want.Created ||
		got.Data == nil || string(got.Data.Raw) != string(want.Data.Raw) || got.Data.Object != nil {
		t.Errorf("DecodeEvent = %+v (data %+v), want %+v with data.object raw only", got, got.Data, want)
	}

	for _, bad := range []string{"", "not json", `[1]`, `{"id":5}`, `{"type":[]}`, `{"data":"x"}`,
		`{"data":{"object":5}}`, `{"data":{"object":"x"}}`, `{"data":{"object":[1]}}`, `{"data":{}}`, `{"id":"evt_1"`} {
		var ev stripe.Event
		if json.Unmarshal([]byte(bad), &ev) == nil {
			t.Fatalf("stripe-go decodes %q; the case tests nothing", bad)
		}
		if ev, err := psp.DecodeEvent([]byte(bad)); err == nil {
			t.Errorf("DecodeEvent(%q) = %+v, want an error", bad, ev)
		}
	}
	for _, ok := range []string{`{}`, `{"id":"evt_1","type":"charge.refunded"}`, `{"data":{"object":null}}`, `{"data":{"object": {}}}`} {
		var ev stripe.Event
		if err := json.Unmarshal([]byte(ok), &ev); err != nil {
			t.Fatalf("stripe-go fails on %q: %v; the case tests nothing", ok, err)
		}
		if _, err := psp.DecodeEvent([]byte(ok)); err != nil {
			t.Errorf("DecodeEvent(%q): %v, want no error", ok, err)
		}
	}
}
