package psp

import (
	"bytes"
	"encoding/json"
	"errors"

	"github.com/stripe/stripe-go/v76"
)

// envelope is what eventq reads of an event's JSON: its data.object stays raw.
type envelope struct {
	ID      string           `json:"id"`
	Type    stripe.EventType `json:"type"`
	Account string           `json:"account"`
	Created int64            `json:"created"`
	Data    *struct {
		Object json.RawMessage `json:"object"`
	} `json:"data"`
}

// errObjectNotObject is DecodeEvent's error for data without an object, or whose object is not
// a JSON object (null is accepted, as stripe-go accepts it).
var errObjectNotObject = errors.New("psp: the event's data.object is not an object")

// DecodeEvent decodes the JSON of an event into the fields eventq reads: ID, Type, Account,
// Created and Data.Raw (data.object, undecoded; Data is nil when the event has no data). It
// fails where stripe-go's decoding fails on these fields. Unlike stripe-go it does not also
// decode data.object into a map (Data.Object stays nil), which took most of the time of
// decoding a checkout event: whoever needs the object decodes Data.Raw into its type.
func DecodeEvent(payload []byte) (stripe.Event, error) {
	var e envelope
	if err := json.Unmarshal(payload, &e); err != nil {
		return stripe.Event{}, err
	}
	ev := stripe.Event{ID: e.ID, Type: e.Type, Account: e.Account, Created: e.Created}
	if e.Data != nil {
		if o := e.Data.Object; len(o) == 0 || o[0] != '{' && !bytes.Equal(o, []byte("null")) {
			return stripe.Event{}, errObjectNotObject
		}
		ev.Data = &stripe.EventData{Raw: e.Data.Object}
	}
	return ev, nil
}
