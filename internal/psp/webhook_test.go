package psp_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/webhook"

	"github.com/eventq/eventq/internal/clock"
	"github.com/eventq/eventq/internal/psp"
)

func TestVerify(t *testing.T) {
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	id, event := psp.NewEvent(stripe.EventTypeCheckoutSessionCompleted, "acct_v", psp.SessionObject{ID: "cs_test_v"}, now)
	notEvent := []byte(`not json`)
	sig := func(payload []byte, secret string) string {
		return fmt.Sprintf("%x", webhook.ComputeSignature(now, payload, secret))
	}
	cases := []struct {
		name    string
		secrets []string
		payload []byte
		header  string
		// advance moves the verifier's clock from the signing time.
		advance time.Duration
		want    error // nil: the event verifies
	}{
		{"accepts a valid signature", []string{"whsec_a"}, event, psp.Sign(event, "whsec_a", now), 0, nil},
		{"refuses a signature with the wrong secret", []string{"whsec_a"}, event, psp.Sign(event, "whsec_b", now), 0, psp.ErrBadSignature},
		{"accepts the second of rotated secrets", []string{"whsec_old", "whsec_new"}, event, psp.Sign(event, "whsec_new", now), 0, nil},
		{"refuses when no rotated secret matches", []string{"whsec_old", "whsec_new"}, event, psp.Sign(event, "whsec_b", now), 0, psp.ErrBadSignature},
		{"refuses a missing header", []string{"whsec_a"}, event, "", 0, psp.ErrNoSignature},
		{"refuses a blank header", []string{"whsec_a"}, event, "  ", 0, psp.ErrNoSignature},
		{"refuses a header without timestamp", []string{"whsec_a"}, event, "v1=" + sig(event, "whsec_a"), 0, psp.ErrBadSignature},
		{"refuses without configured secrets", nil, event, psp.Sign(event, "whsec_a", now), 0, psp.ErrNoSecret},
		{"accepts a timestamp at the tolerance", []string{"whsec_a"}, event, psp.Sign(event, "whsec_a", now), psp.Tolerance, nil},
		{"refuses a stale timestamp", []string{"whsec_a"}, event, psp.Sign(event, "whsec_a", now), psp.Tolerance + time.Second, psp.ErrStale},
		{"refuses a timestamp from the future", []string{"whsec_a"}, event, psp.Sign(event, "whsec_a", now), -psp.Tolerance - time.Second, psp.ErrStale},
		{"refuses a signed body that is not an event", []string{"whsec_a"}, notEvent, psp.Sign(notEvent, "whsec_a", now), 0, psp.ErrMalformedBody},
		{"refuses a tampered body", []string{"whsec_a"}, append([]byte(" "), event...), psp.Sign(event, "whsec_a", now), 0, psp.ErrBadSignature},
		{"accepts one matching signature among several", []string{"whsec_a"}, event,
			fmt.Sprintf("t=%d,v1=%s,v1=%s", now.Unix(), sig(event, "whsec_b"), sig(event, "whsec_a")), 0, nil},
		{"refuses several signatures none of which matches", []string{"whsec_a"}, event,
			fmt.Sprintf("t=%d,v1=%s,v1=%s", now.Unix(), sig(event, "whsec_b"), sig(event, "whsec_c")), 0, psp.ErrBadSignature},
		// A replay: the signature and its t= of 72 hours ago, behind a fresh t= for the
		// tolerance check (stripe-go checks the signature against the last t=).
		{"refuses a fresh timestamp in front of a replayed signed one", []string{"whsec_a"}, event,
			fmt.Sprintf("t=%d,%s", now.Add(72*time.Hour).Unix(), psp.Sign(event, "whsec_a", now)), 72 * time.Hour, psp.ErrBadSignature},
		{"refuses a repeated timestamp even when both are the signed one", []string{"whsec_a"}, event,
			fmt.Sprintf("t=%d,%s", now.Unix(), psp.Sign(event, "whsec_a", now)), 0, psp.ErrBadSignature},
		{"refuses a fresh timestamp written after the signed one", []string{"whsec_a"}, event,
			fmt.Sprintf("%s,t=%d", psp.Sign(event, "whsec_a", now), now.Add(72*time.Hour).Unix()), 72 * time.Hour, psp.ErrBadSignature},
		{"refuses a padded timestamp key stripe-go would not read", []string{"whsec_a"}, event,
			fmt.Sprintf(" t=%d,v1=%s", now.Unix(), sig(event, "whsec_a")), 0, psp.ErrBadSignature},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clk := clock.NewFake(now)
			clk.Advance(tc.advance)
			ev, err := psp.NewVerifier(tc.secrets, clk).Verify(tc.payload, tc.header)
			if tc.want != nil {
				if !errors.Is(err, tc.want) {
					t.Fatalf("Verify error %v, want %v", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			if ev.ID != id || ev.Type != stripe.EventTypeCheckoutSessionCompleted || ev.Account != "acct_v" {
				t.Errorf("event %s of type %s on %q, want %s, %s, acct_v", ev.ID, ev.Type, ev.Account, id, stripe.EventTypeCheckoutSessionCompleted)
			}
		})
	}
}
