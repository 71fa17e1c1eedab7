package payments

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"

	"github.com/stripe/stripe-go/v76"
	"gorm.io/gorm"

	"github.com/eventq/eventq/internal/psp"
	"github.com/eventq/eventq/models"
)

// The objects (data.object's "object") that the handled provider events carry.
const (
	ObjectCheckoutSession = "checkout.session"
	ObjectCharge          = "charge"
	ObjectDispute         = "dispute"
)

// eventType is what the flow knows of one provider event type: the object its events carry,
// and how to read from an event the work it asks for.
type eventType struct {
	object string
	read   func(ev *stripe.Event) (work, error)
}

// eventTypes is the one list of the provider event types the flow acts on. The webhook, the
// inbox, reconciliation, the worker's tasks and `eventq webhook send` all take their types from
// it, so handling a new type is one entry here (and, for a new kind of work, its reader).
var eventTypes = map[stripe.EventType]eventType{
	stripe.EventTypeCheckoutSessionCompleted:             {ObjectCheckoutSession, readCheckout},
	stripe.EventTypeCheckoutSessionAsyncPaymentSucceeded: {ObjectCheckoutSession, readCheckout},
	stripe.EventTypeChargeRefunded:                       {ObjectCharge, readRefund},
	stripe.EventTypeChargeDisputeCreated:                 {ObjectDispute, readDispute},
}

// HandledTypes lists every provider event type the flow acts on, sorted.
func HandledTypes() []string {
	types := make([]string, 0, len(eventTypes))
	for t := range eventTypes {
		types = append(types, string(t))
	}
	sort.Strings(types)
	return types
}

// Handles reports whether the flow acts on provider events of eventType.
func Handles(eventType string) bool {
	_, ok := eventTypes[stripe.EventType(eventType)]
	return ok
}

// EventObject returns the kind of object (ObjectCheckoutSession, ObjectCharge, ObjectDispute)
// that events of eventType carry; ok is false for a type the flow does not handle.
func EventObject(eventType string) (object string, ok bool) {
	et, ok := eventTypes[stripe.EventType(eventType)]
	return et.object, ok
}

// OutcomeIgnored is what HandleEvent reports for an event that changes nothing (a partial
// refund).
const OutcomeIgnored = "ignored"

// work is what one provider event asks of the flow.
type work interface {
	// do performs it for event eventID and returns its outcome. It is idempotent; errors
	// wrapping ErrRejected are permanent.
	do(ctx context.Context, svc *Service, eventID string) (string, error)
	// done reports whether the database already reflects it.
	done(ctx context.Context, db *gorm.DB) (bool, error)
}

// HandleEvent does what the verified provider event payload (its JSON) means: a paid checkout
// session is fulfilled (as the return page fulfils it, Return), a full refund or a dispute ends
// its purchase, a partial refund changes nothing. It returns the outcome: a fulfilment status
// (StatusFulfilled …), a revocation outcome (RevokeApplied …), or OutcomeIgnored. Idempotent, and safe to run concurrently with
// itself and the return page. An error wrapping ErrRejected means the event can never be
// processed (not an event, a type the flow does not handle, an object it cannot use, or a
// tenant, member, product or account that does not match): retrying is pointless. Any other
// error is transient.
func (svc *Service) HandleEvent(ctx context.Context, payload []byte) (string, error) {
	ev, err := psp.DecodeEvent(payload)
	if err != nil || ev.Data == nil {
		return "", fmt.Errorf("event: %w: the payload is not a provider event", ErrRejected)
	}
	w, err := workOf(&ev)
	if err != nil {
		return "", err
	}
	return w.do(ctx, svc, ev.ID)
}

// workOf reads the work ev asks for; an error wraps ErrRejected.
func workOf(ev *stripe.Event) (work, error) {
	et, ok := eventTypes[ev.Type]
	if !ok {
		return nil, fmt.Errorf("event: %w: event %s: type %q is not handled", ErrRejected, ev.ID, ev.Type)
	}
	if ev.Data == nil {
		return nil, fmt.Errorf("event: %w: event %s carries no data", ErrRejected, ev.ID)
	}
	return et.read(ev)
}

// fulfilment is the work of a checkout event: fulfil its session.
type fulfilment struct{ s Session }

func readCheckout(ev *stripe.Event) (work, error) {
	s, err := decodeSession(ev)
	if err != nil || s.ID == "" {
		return nil, fmt.Errorf("event: %w: event %s carries no checkout session", ErrRejected, ev.ID)
	}
	return fulfilment{s}, nil
}

func (f fulfilment) do(ctx context.Context, svc *Service, eventID string) (string, error) {
	res, err := svc.fulfil(ctx, f.s)
	if errors.Is(err, ErrRejected) {
		svc.Log.Warn("checkout not fulfilled", "event_id", eventID, "session_id", f.s.ID, "reason", err.Error())
		return "", err
	}
	if err != nil {
		return "", fmt.Errorf("fulfil checkout %s: %w", f.s.ID, err)
	}
	svc.Log.Info("checkout processed", "event_id", eventID, "session_id", f.s.ID, "status", res.Status, "purchase_id", res.PurchaseID)
	return res.Status, nil
}

func (f fulfilment) done(ctx context.Context, db *gorm.DB) (bool, error) {
	r, err := refsOf(f.s)
	if err != nil {
		return false, nil // nothing was stored for it: fulfilling it says why
	}
	var n int64
	if err := db.WithContext(ctx).Model(&models.Purchase{}).Where("tenant_id = ? AND psp_checkout_session_id = ?", r.tenant, f.s.ID).Count(&n).Error; err != nil {
		return false, fmt.Errorf("look up purchase: %w", err)
	}
	return n > 0, nil
}

// revocation is the work of a full refund or a dispute: end the purchase.
type revocation struct{ r reversal }

func (v revocation) do(ctx context.Context, svc *Service, eventID string) (string, error) {
	out, err := svc.revoke(ctx, v.r)
	if errors.Is(err, ErrRejected) {
		svc.Log.Warn("purchase not revoked", "event_id", eventID, "reason", err.Error())
		return "", err
	}
	if err != nil {
		return "", fmt.Errorf("revoke purchase for %s: %w", v.r.PaymentIntent, err)
	}
	svc.Log.Info("reversal processed", "event_id", eventID, "kind", v.r.Kind, "payment_intent", v.r.PaymentIntent, "outcome", out)
	return out, nil
}

func (v revocation) done(ctx context.Context, db *gorm.DB) (bool, error) {
	var n int64
	err := db.WithContext(ctx).Model(&models.PurchaseReversal{}).
		Where("psp_payment_intent_id = ? AND kind = ? AND account = ?", v.r.PaymentIntent, v.r.Kind, v.r.Account).Count(&n).Error
	if err != nil {
		return false, fmt.Errorf("look up reversal: %w", err)
	}
	return n > 0, nil
}

// partialRefund is the work of a refund of part of a charge: nothing.
type partialRefund struct{}

func (partialRefund) do(_ context.Context, svc *Service, eventID string) (string, error) {
	svc.Metrics.Revocation(OutcomeIgnored)
	svc.Log.Info("partial refund ignored", "event_id", eventID)
	return OutcomeIgnored, nil
}

func (partialRefund) done(context.Context, *gorm.DB) (bool, error) { return true, nil }

func readRefund(ev *stripe.Event) (work, error) {
	var ch stripe.Charge
	if err := json.Unmarshal(ev.Data.Raw, &ch); err != nil || ch.ID == "" {
		return nil, fmt.Errorf("event: %w: event %s carries no charge", ErrRejected, ev.ID)
	}
	if !ch.Refunded && (ch.Amount == 0 || ch.AmountRefunded < ch.Amount) {
		return partialRefund{}, nil
	}
	return reversalOf(ev, models.PurchaseRefunded, ch.PaymentIntent)
}

func readDispute(ev *stripe.Event) (work, error) {
	var d stripe.Dispute
	if err := json.Unmarshal(ev.Data.Raw, &d); err != nil || d.ID == "" {
		return nil, fmt.Errorf("event: %w: event %s carries no dispute", ErrRejected, ev.ID)
	}
	return reversalOf(ev, models.PurchaseDisputed, d.PaymentIntent)
}

// reversalOf is the revocation of kind that ev reports for payment intent pi.
func reversalOf(ev *stripe.Event, kind string, pi *stripe.PaymentIntent) (work, error) {
	if pi == nil || pi.ID == "" {
		return nil, fmt.Errorf("event: %w: event %s names no payment intent", ErrRejected, ev.ID)
	}
	return revocation{reversal{Kind: kind, PaymentIntent: pi.ID, Account: ev.Account, EventID: ev.ID}}, nil
}
