package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// FinalAckTimeout bounds the one Ack ConsumeShared still sends for a batch when its context
// was cancelled.
const FinalAckTimeout = 10 * time.Second

// SharedOption configures ConsumeShared and ConsumeSharedBatch.
type SharedOption func(*sharedConfig)

type sharedConfig struct {
	limit      int
	visibility time.Duration
}

// WithLeaseLimit sets how many events each lease call asks for (1–MaxLeaseLimit, default
// DefaultLeaseLimit = 100). Values out of range keep the default.
func WithLeaseLimit(n int) SharedOption {
	return func(c *sharedConfig) {
		if n >= 1 && n <= MaxLeaseLimit {
			c.limit = n
		}
	}
}

// WithVisibility sets how long each lease lasts before it must be extended (default
// DefaultVisibility = 30s; whole seconds, rounded up, at most MaxVisibility). It bounds how
// long the events of a consumer that died stay invisible to the others. Non-positive values
// keep the default.
func WithVisibility(d time.Duration) SharedOption {
	return func(c *sharedConfig) {
		if d > 0 {
			c.visibility = time.Duration(visibilitySeconds(d)) * time.Second
		}
	}
}

// errNotRun marks an event the handler was not given because the context was cancelled.
var errNotRun = errors.New("not handled: cancelled")

// ConsumeShared runs a consumer loop that can share the tenant's queue with any number of
// other ConsumeShared loops, in this process or others, through any api process: it leases
// a batch (WithLeaseLimit, 100 by default), calls handler once per event, in offset order,
// and settles the batch in one Ack: its batch id alone when every event was handled, lease
// ids otherwise; repeat. Different consumers get disjoint batches.
//
// Delivery is at least once, with no order across consumers. An event is acknowledged only
// after handler returned nil for it. While the handler runs, the batch's leases are extended
// every third of the visibility (WithVisibility, 30s by default), so a slow handler keeps
// its events however long it takes; if this process dies, its events come back to the other
// consumers once the visibility has passed, with LeasedEvent.Deliveries counting up. A
// redelivered event comes after later ones. Handlers must be idempotent by Event.ID.
//
// Handler errors never stop the loop: the event is handed back for another delivery after a
// back-off that grows with its deliveries (min·2ⁿ⁻¹ for the n-th delivery, capped at max, see
// WithBackoff). A back-off under a second hands it back at once (an Ack retry); a longer one
// keeps it invisible that long (an Ack extend) before any consumer may lease it again. After
// EVENTQUEUE_MAX_DELIVERIES deliveries the server moves it to the dead letters (DeadLetters).
// When every event of a batch failed, the loop itself also waits the next back-off before
// leasing again, so that a broken dependency does not burn through the queue.
//
// Waiting and errors are as for Consume: lease calls long-poll (WithLongPoll), an empty
// answer without long polling waits a back-off, transient errors (IsTransient) are retried
// after a back-off or the server's Retry-After, and a permanent error is returned. Acks are
// safe to repeat, so a lost answer is simply sent again.
//
// Cancellation: ConsumeShared returns nil once ctx is cancelled. A lease call cut off by the
// cancellation may have leased events nobody sees: they are leased to no one after the
// visibility. Within a batch, the handler call under way receives the cancelled ctx, no
// further event is handed to the handler, and one final Ack (bounded by FinalAckTimeout)
// acknowledges the events whose handler returned nil and hands back every other event of the
// batch at once; if that Ack fails, its error is returned and the unacknowledged events come
// back after the visibility. Leases are extended until the handler call returns.
func (c *Client) ConsumeShared(ctx context.Context, handler func(ctx context.Context, e LeasedEvent) error, opts ...SharedOption) error {
	return c.consumeShared(ctx, opts, func(ctx context.Context, events []LeasedEvent, results []error) {
		for i, e := range events {
			if ctx.Err() != nil {
				results[i] = errNotRun
				continue
			}
			results[i] = handler(ctx, e)
		}
	})
}

// ConsumeSharedBatch is ConsumeShared with one handler call per leased batch, events in
// offset order: nil acknowledges the whole batch, an error hands the whole batch back (with
// the back-off of ConsumeShared). Everything else, guarantees included, is as for
// ConsumeShared.
func (c *Client) ConsumeSharedBatch(ctx context.Context, handler func(ctx context.Context, events []LeasedEvent) error, opts ...SharedOption) error {
	return c.consumeShared(ctx, opts, func(ctx context.Context, events []LeasedEvent, results []error) {
		err := handler(ctx, events)
		for i := range results {
			results[i] = err
		}
	})
}

// consumeShared is the loop of ConsumeShared: process sets results[i] for events[i].
func (c *Client) consumeShared(ctx context.Context, opts []SharedOption, process func(context.Context, []LeasedEvent, []error)) error {
	cfg := sharedConfig{limit: DefaultLeaseLimit, visibility: DefaultVisibility}
	for _, opt := range opts {
		opt(&cfg)
	}
	b := backoff{min: c.minBackoff, max: c.maxBackoff, jitter: c.jitter}
	for {
		leases, err := c.Lease(ctx, cfg.limit, cfg.visibility, c.longPoll)
		switch {
		case err == nil && len(leases.Events) > 0 && ctx.Err() != nil:
			return c.settle(ctx, &b, AckRequest{Retries: leaseIDs(leases.Events)}) // hand them back
		case ctx.Err() != nil:
			return nil
		case err != nil:
			if !IsTransient(err) {
				return err
			}
			if c.wait(ctx, &b, err) != nil {
				return nil
			}
			continue
		case len(leases.Events) == 0:
			if c.longPoll >= time.Second {
				continue // the server waited for us
			}
			if c.wait(ctx, &b, nil) != nil {
				return nil
			}
			continue
		}
		allFailed, err := c.runLeased(ctx, &b, cfg, leases, process)
		if err != nil {
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
		if !allFailed {
			b.reset()
			continue
		}
		d := b.next()
		c.log.WarnContext(ctx, "eventq client: every event of the batch failed, waiting", "events", len(leases.Events), "wait", d)
		if c.sleep(ctx, d) != nil {
			return nil
		}
	}
}

// runLeased hands the leased events to process while their leases are kept, then settles
// them: one batch ack when every event was handled, else acks for the handled ones and the
// others handed back after their back-off. allFailed reports that no event succeeded.
func (c *Client) runLeased(ctx context.Context, b *backoff, cfg sharedConfig, leases Leases, process func(context.Context, []LeasedEvent, []error)) (allFailed bool, err error) {
	events := leases.Events
	results := make([]error, len(events))
	stop := c.keepLeases(ctx, cfg.visibility, events)
	process(ctx, events, results)
	stop()

	if leases.BatchID != "" && !slices.ContainsFunc(results, func(err error) bool { return err != nil }) {
		return false, c.settleBatch(ctx, b, leases)
	}
	var req AckRequest
	later := map[time.Duration][]string{} // hand back after a back-off of at least 1s
	allFailed = true
	for i, e := range events {
		switch res := results[i]; {
		case res == nil:
			req.Acks = append(req.Acks, e.LeaseID)
			allFailed = false
		case errors.Is(res, errNotRun):
			req.Retries = append(req.Retries, e.LeaseID)
		default:
			d := c.redeliveryDelay(e.Deliveries)
			if ctx.Err() != nil {
				d = 0 // stopping: hand it back at once
			}
			c.log.WarnContext(ctx, "eventq client: handler failed, the event will be delivered again",
				"id", e.Event.ID, "deliveries", e.Deliveries, "after", d, "err", res)
			if d < time.Second {
				req.Retries = append(req.Retries, e.LeaseID)
			} else {
				secs := time.Duration(visibilitySeconds(d)) * time.Second
				later[secs] = append(later[secs], e.LeaseID)
			}
		}
	}
	if err := c.settle(ctx, b, req); err != nil {
		return allFailed, err
	}
	for d, ids := range later {
		if err := c.settle(ctx, b, AckRequest{Extends: ids, Visibility: d}); err != nil {
			return allFailed, err
		}
	}
	return allFailed, nil
}

// redeliveryDelay is how long an event that failed on its n-th delivery stays invisible:
// min·2ⁿ⁻¹, capped at max.
func (c *Client) redeliveryDelay(deliveries int) time.Duration {
	d := c.minBackoff
	for i := 1; i < deliveries && d < c.maxBackoff; i++ {
		d *= 2
	}
	return min(d, c.maxBackoff)
}

// keepLeases extends the leases of events every third of visibility until stop is called
// (also after ctx is cancelled: the handler still holds them). Leases the server no longer
// extends (expired, trimmed) are dropped from the extensions and logged.
func (c *Client) keepLeases(ctx context.Context, visibility time.Duration, events []LeasedEvent) (stop func()) {
	ids := leaseIDs(events)
	ectx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(max(visibility/3, 100*time.Millisecond))
		defer t.Stop()
		for len(ids) > 0 {
			select {
			case <-ectx.Done():
				return
			case <-t.C:
			}
			res, err := c.Ack(ectx, AckRequest{Extends: ids, Visibility: visibility})
			if err != nil {
				if ectx.Err() == nil {
					c.log.WarnContext(ctx, "eventq client: extending leases failed, trying again", "leases", len(ids), "err", err)
				}
				continue
			}
			kept := ids[:0:0]
			for _, r := range res {
				if r.Status == StatusExtended {
					kept = append(kept, r.LeaseID)
				} else {
					c.log.WarnContext(ctx, "eventq client: a lease was lost while the handler ran", "lease_id", r.LeaseID, "status", r.Status)
				}
			}
			ids = kept
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// settle sends req, repeating it after transient errors (every part of an Ack is safe to
// repeat). Once ctx is cancelled it sends one last attempt bounded by FinalAckTimeout.
func (c *Client) settle(ctx context.Context, b *backoff, req AckRequest) error {
	n := len(req.Acks) + len(req.Retries) + len(req.Extends)
	if n == 0 {
		return nil
	}
	return c.persist(ctx, b, FinalAckTimeout, fmt.Sprintf("%d leases are left to expire", n), func(ctx context.Context) error {
		res, err := c.Ack(ctx, req)
		if err == nil {
			c.logSettled(ctx, res)
		}
		return err
	})
}

// settleBatch acknowledges every event of leases (AckBatch), repeating it after transient
// errors.
func (c *Client) settleBatch(ctx context.Context, b *backoff, leases Leases) error {
	return c.persist(ctx, b, FinalAckTimeout, fmt.Sprintf("%d leases are left to expire", len(leases.Events)), func(ctx context.Context) error {
		_, err := c.AckBatch(ctx, leases)
		return err
	})
}

// logSettled logs the acks that did not land as acknowledged: the event was trimmed (a plain
// DELETE, or the dead letters) or the lease id is unknown (the queue was rebuilt).
func (c *Client) logSettled(ctx context.Context, res []AckResult) {
	for _, r := range res {
		if r.Status == StatusTrimmed || r.Status == StatusUnknown {
			c.log.InfoContext(ctx, "eventq client: lease settled without effect", "lease_id", r.LeaseID, "status", r.Status)
		}
	}
}

func leaseIDs(events []LeasedEvent) []string {
	ids := make([]string, len(events))
	for i, e := range events {
		ids[i] = e.LeaseID
	}
	return ids
}
