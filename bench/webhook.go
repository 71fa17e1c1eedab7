package main

import (
	"context"
	"fmt"
	"time"

	"github.com/stripe/stripe-go/v76"

	"github.com/eventq/eventq/internal/payments"
	"github.com/eventq/eventq/internal/psp"
)

// Webhook is scenario 4: signed checkout.session.completed deliveries at a fixed rate, with
// the worker running (as in production), beside GET /healthz at the same rate (the HTTP floor:
// the same server and load generator, no work).
type Webhook struct {
	RatePerSec      float64   `json:"rate_per_second"`
	DurationSeconds float64   `json:"duration_seconds"`
	Due             int       `json:"due"`
	OK              int       `json:"ok"`
	Non200          int       `json:"non_200"` // failures: other statuses and transport errors
	Dropped         int       `json:"dropped"`
	API             Latency   `json:"api"`
	P99BySecond     []float64 `json:"api_p99_ms_by_second"`
	Floor           Latency   `json:"floor_healthz"`
	FloorSeconds    float64   `json:"floor_duration_seconds"`
	// For context, not a target: more deliveries at the same rate with the worker stopped, so
	// the api does not share the CPUs with fulfilment.
	WorkerStoppedSeconds float64 `json:"worker_stopped_duration_seconds"`
	WorkerStopped        Latency `json:"api_worker_stopped"`
	WorkerStoppedNon200  int     `json:"non_200_worker_stopped"`
	Ratio                float64 `json:"ratio_p99"` // API p99 ÷ floor p99
	TargetP99            float64 `json:"target_p99_ms_max"`
	Met                  bool    `json:"met"` // p99 within target and every delivery answered 200
}

// delivery is one signed provider event about one paid session.
type delivery struct {
	session string
	payload []byte
	sig     string
}

// paidDeliveries builds n distinct checkout.session.completed events for shop's member and
// product on its connected account, signed now.
func paidDeliveries(shop *tenant, n int, tag string) []delivery {
	now := time.Now()
	out := make([]delivery, n)
	meta := payments.Metadata(shop.ID, shop.Member.ID, shop.Product.ID)
	for i := range out {
		id := psp.NewID("cs_test_" + tag)
		pi := psp.NewID("pi")
		cs := psp.SessionObject{
			ID: id, AmountTotal: shop.Product.Amount, Currency: shop.Product.Currency,
			CustomerEmail: shop.Member.Email, Metadata: meta, Mode: "payment", PaymentIntent: &pi,
			PaymentStatus: "paid", Status: "complete", Created: now.Unix(),
			SuccessURL: "https://shop.example/checkout/return?session_id={CHECKOUT_SESSION_ID}",
			CancelURL:  "https://shop.example/cart",
		}
		_, payload := psp.NewEvent(stripe.EventTypeCheckoutSessionCompleted, *shop.PSPAccountID, cs, now)
		out[i] = delivery{session: id, payload: payload, sig: psp.Sign(payload, webhookSecret, now)}
	}
	return out
}

// postDelivery posts d to the webhook and requires 200.
func (s *stack) postDelivery(ctx context.Context, d delivery) error {
	req := s.request(ctx, "POST", "/api/webhooks/psp", "", d.payload)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("PSP-Signature", d.sig)
	return expect(s.http, req, 200)
}

// benchWebhook runs scenario 4 for d at rate on shop.
func benchWebhook(ctx context.Context, s *stack, shop *tenant, rate float64, d, aloneFor time.Duration) (*Webhook, error) {
	res := &Webhook{RatePerSec: rate, DurationSeconds: d.Seconds(), TargetP99: 5}
	n := int(rate * d.Seconds())
	deliveries := paidDeliveries(shop, n, "ack")

	// The floor first; it also opens the client's connections.
	fd := min(d, 5*time.Second)
	floor := openLoop{Rate: rate, N: int(rate * fd.Seconds()), Do: func(ctx context.Context, _ int) error {
		return expect(s.http, s.request(ctx, "GET", "/healthz", "", nil), 200)
	}}.run(ctx)
	if floor.Failed > 0 {
		return nil, fmt.Errorf("GET /healthz failed %d times: %s", floor.Failed, floor.FirstErr)
	}
	res.Floor, res.FloorSeconds = summarize(floor.Lat), fd.Seconds()
	if err := sleepCtx(ctx, 200*time.Millisecond); err != nil {
		return nil, err
	}

	wait := s.profileDuring(ctx, "webhook", d)
	r := openLoop{Rate: rate, N: n, Do: func(ctx context.Context, i int) error {
		return s.postDelivery(ctx, deliveries[i])
	}}.run(ctx)
	wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	res.Due, res.OK, res.Non200, res.Dropped = r.Due, r.OK, r.Failed, r.Dropped
	res.P99BySecond = r.p99BySecond()
	res.API = summarize(r.Lat)
	if r.Failed > 0 {
		s.logf("  webhook: %d not 200, first: %s", r.Failed, r.FirstErr)
	}
	s.logf("  webhook: p50 %.2f ms, p99 %.2f ms; p99 by second: %.1f", res.API.P50, res.API.P99, res.P99BySecond)

	s.logf("webhook: %.0f/s for %s with the worker stopped", rate, aloneFor)
	s.worker.stop()
	res.WorkerStoppedSeconds = aloneFor.Seconds()
	alone := paidDeliveries(shop, int(rate*aloneFor.Seconds()), "alone")
	r = openLoop{Rate: rate, N: len(alone), Do: func(ctx context.Context, i int) error {
		return s.postDelivery(ctx, alone[i])
	}}.run(ctx)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	res.WorkerStopped, res.WorkerStoppedNon200 = summarize(r.Lat), r.Failed+r.Dropped
	if res.Floor.P99 > 0 {
		res.Ratio = res.API.P99 / res.Floor.P99
	}
	res.Met = res.API.P99 <= res.TargetP99 && res.Non200 == 0 && res.Dropped == 0
	return res, nil
}
