package payments

import (
	"context"
	"errors"
	"time"
)

// enqueueTimeout bounds the Redis round trip of a webhook; past it the event goes to the
// database inbox, which the worker drains with the same task id, so falling back early costs
// only a few seconds of delay, never a duplicate.
const enqueueTimeout = 300 * time.Millisecond

// Outcome is what Receive did with a webhook delivery.
type Outcome int

// The outcomes of Receive; every one but Refused means the signature was verified.
const (
	Refused   Outcome = iota // bad or missing signature, stale timestamp, or not an event
	Ignored                  // an event of a type the flow does not handle (Handles), or without id
	Enqueued                 // queued for the worker under its event id
	Duplicate                // queued before (a redelivery): nothing done
	Inboxed                  // the enqueue failed; saved to the database inbox for the worker
	Lost                     // the enqueue and the inbox both failed
)

// Receipt reports what Receive did, for the caller's metrics and log.
type Receipt struct {
	Outcome   Outcome
	EventID   string
	EventType string
	// Err is why the delivery was refused (Refused), or why its enqueue failed (Inboxed, Lost).
	Err error
	// InboxErr is why saving to the inbox failed (Lost).
	InboxErr error
}

// Receive handles one webhook delivery: payload is the raw body, signature the signature
// header. A verified event of a handled type is enqueued under its event id within enqueueTimeout;
// when that fails it is saved to the database inbox, which DrainInbox empties later. Nothing
// else touches the database. It never fails: the Receipt says what happened. payload must not
// change after the call (the task or the inbox row keeps it).
func (svc *Service) Receive(ctx context.Context, payload []byte, signature string) Receipt {
	ev, err := svc.Webhooks.Verify(payload, signature)
	if err != nil {
		return Receipt{Outcome: Refused, Err: err}
	}
	r := Receipt{EventID: ev.ID, EventType: string(ev.Type)}
	if r.EventID == "" || !Handles(r.EventType) {
		r.Outcome = Ignored
		return r
	}
	qctx, cancel := context.WithTimeout(ctx, enqueueTimeout)
	defer cancel()
	err = svc.Queue.Enqueue(qctx, r.EventID, r.EventType, payload)
	switch {
	case err == nil:
		r.Outcome = Enqueued
	case errors.Is(err, ErrAlreadyQueued):
		r.Outcome = Duplicate
	default:
		r.Outcome, r.Err = Inboxed, err
		if r.InboxErr = svc.saveToInbox(context.WithoutCancel(ctx), r.EventID, r.EventType, payload); r.InboxErr != nil {
			r.Outcome = Lost
		}
	}
	return r
}
