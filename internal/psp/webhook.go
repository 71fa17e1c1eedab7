// Package psp is eventq's side of the payment provider (Stripe, through stripe-go): webhook
// verification, the two Checkout Session calls the service makes, and the event list that
// reconciliation reads. It knows the provider's API and nothing of eventq's payment flow
// (internal/payments), which decides what event types it handles. NewEvent and Sign build signed events as the provider sends them, for
// `eventq webhook send`, the fake provider and tests.
package psp

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/webhook"

	"github.com/eventq/eventq/internal/clock"
)

// Tolerance is how far a signature's timestamp may be from now.
const Tolerance = 300 * time.Second

// Reasons a webhook is refused; each is logged and counted, never shown to the caller.
var (
	ErrNoSecret      = errors.New("psp: no webhook secret configured")
	ErrNoSignature   = errors.New("psp: signature header missing")
	ErrBadSignature  = errors.New("psp: signature does not match")
	ErrStale         = errors.New("psp: signature timestamp outside tolerance")
	ErrMalformedBody = errors.New("psp: payload is not an event")
)

// Verifier checks webhook signatures against every configured secret (rotation: any may
// match) with Tolerance measured on its clock, ignoring API-version mismatches.
type Verifier struct {
	secrets []string
	clock   clock.Clock
}

// NewVerifier returns a Verifier for secrets.
func NewVerifier(secrets []string, clk clock.Clock) *Verifier {
	return &Verifier{secrets: secrets, clock: clk}
}

// Verify authenticates payload (the raw body) against header and decodes the event as
// DecodeEvent does.
func (v *Verifier) Verify(payload []byte, header string) (stripe.Event, error) {
	if len(v.secrets) == 0 {
		return stripe.Event{}, ErrNoSecret
	}
	if strings.TrimSpace(header) == "" {
		return stripe.Event{}, ErrNoSignature
	}
	ts, ok := timestamp(header)
	if !ok {
		return stripe.Event{}, ErrBadSignature
	}
	for _, secret := range v.secrets {
		err := webhook.ValidatePayloadIgnoringTolerance(payload, header, secret)
		switch {
		case err == nil:
			if d := v.clock.Now().Sub(ts); d > Tolerance || d < -Tolerance {
				return stripe.Event{}, ErrStale
			}
			ev, err := DecodeEvent(payload)
			if err != nil { // signature matched, the body is not an event
				return stripe.Event{}, fmt.Errorf("%w: %v", ErrMalformedBody, err)
			}
			return ev, nil
		case errors.Is(err, webhook.ErrNoValidSignature), errors.Is(err, webhook.ErrInvalidHeader),
			errors.Is(err, webhook.ErrNotSigned):
			continue
		default:
			return stripe.Event{}, fmt.Errorf("%w: %v", ErrBadSignature, err)
		}
	}
	return stripe.Event{}, ErrBadSignature
}

// timestamp is the header's t= value, read as stripe-go reads the one its signature check
// covers (the last "t=" element, its key unpadded). A header with more than one t= element, or
// whose only one stripe-go would not read, has none: a replay could otherwise pair a fresh t=
// for the tolerance with the old one the signature was made over.
func timestamp(header string) (time.Time, bool) {
	var (
		found int
		value string
	)
	for _, part := range strings.Split(header, ",") {
		key, v, _ := strings.Cut(part, "=")
		if strings.TrimSpace(key) != "t" {
			continue
		}
		if found++; key != "t" {
			return time.Time{}, false
		}
		value = v
	}
	if found != 1 {
		return time.Time{}, false
	}
	n, err := strconv.ParseInt(value, 10, 64)
	return time.Unix(n, 0), err == nil
}

// Sign returns a signature header for payload as the provider would send it at t. Used by
// `eventq webhook send` and tests.
func Sign(payload []byte, secret string, t time.Time) string {
	return fmt.Sprintf("t=%d,v1=%x", t.Unix(), webhook.ComputeSignature(t, payload, secret))
}
