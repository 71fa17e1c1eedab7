package psp

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"time"

	"github.com/stripe/stripe-go/v76"
)

// APIVersion is the API version written into events built here; real endpoints may send
// others, which verification ignores.
const APIVersion = "2023-10-16"

// NewID returns a provider-style id such as "evt_1a2b…".
func NewID(prefix string) string {
	b := make([]byte, 12)
	rand.Read(b)
	return prefix + "_" + hex.EncodeToString(b)
}

// SessionObject is a Checkout Session as the provider writes it in JSON (an event's data.object,
// or an API answer): the wire fixture from which `eventq webhook send`, the fake provider and
// tests build what the provider would send. It is not part of the payment flow, which decodes
// sessions with stripe-go and knows them only as payments.Session.
type SessionObject struct {
	ID            string            `json:"id"`
	Object        string            `json:"object"`
	AmountTotal   int64             `json:"amount_total"`
	Currency      string            `json:"currency"`
	CustomerEmail string            `json:"customer_email,omitempty"`
	Livemode      bool              `json:"livemode"`
	Metadata      map[string]string `json:"metadata"`
	Mode          string            `json:"mode"`
	PaymentIntent *string           `json:"payment_intent"`
	PaymentStatus string            `json:"payment_status"`
	Status        string            `json:"status"`
	SuccessURL    string            `json:"success_url"`
	CancelURL     string            `json:"cancel_url"`
	URL           *string           `json:"url"`
	Created       int64             `json:"created"`
}

// ChargeObject is a Charge as the provider writes it in JSON, for events built by tests and
// the fake provider.
type ChargeObject struct {
	ID             string `json:"id"`
	Object         string `json:"object"`
	Amount         int64  `json:"amount"`
	AmountRefunded int64  `json:"amount_refunded"`
	Currency       string `json:"currency"`
	PaymentIntent  string `json:"payment_intent"`
	Refunded       bool   `json:"refunded"`
	Created        int64  `json:"created"`
}

// DisputeObject is a Dispute as the provider writes it in JSON, for events built by tests and
// the fake provider.
type DisputeObject struct {
	ID            string `json:"id"`
	Object        string `json:"object"`
	Amount        int64  `json:"amount"`
	Charge        string `json:"charge"`
	Currency      string `json:"currency"`
	PaymentIntent string `json:"payment_intent"`
	Reason        string `json:"reason"`
	Status        string `json:"status"`
	Created       int64  `json:"created"`
}

// NewEvent builds a realistic event of eventType about session, as delivered for a connected
// account (account "" is the platform). It returns the event id and the JSON payload.
func NewEvent(eventType stripe.EventType, account string, session SessionObject, at time.Time) (string, []byte) {
	if session.Object == "" {
		session.Object = "checkout.session"
	}
	return NewObjectEvent(eventType, account, session, at)
}

// NewObjectEvent builds a realistic event of eventType whose data.object is object, on
// account ("" for the platform). It returns the event id and the JSON payload.
func NewObjectEvent(eventType stripe.EventType, account string, object any, at time.Time) (string, []byte) {
	id := NewID("evt")
	ev := map[string]any{
		"id": id, "object": "event", "api_version": APIVersion, "created": at.Unix(),
		"data": map[string]any{"object": object}, "livemode": false, "pending_webhooks": 1,
		"request": map[string]any{"id": nil, "idempotency_key": nil}, "type": eventType,
	}
	if account != "" {
		ev["account"] = account
	}
	b, _ := json.Marshal(ev)
	return id, b
}
