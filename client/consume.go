package client

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// FinalTrimTimeout bounds the one trim Consume still sends for a batch the handler finished
// after the context was cancelled.
const FinalTrimTimeout = 10 * time.Second

// Consume runs the basic consumer loop (read, process, trim) until ctx is cancelled or an error
// is permanent: read a batch; if it is empty, wait and read again; otherwise call handler with
// the whole batch and, once it returns nil, trim exactly batch.Count events; repeat. Batches
// reach the handler one at a time, in queue order.
//
// Waiting: reads long-poll (WithLongPoll, 20s by default): on an empty queue the server holds
// the read until an event arrives, so a new event reaches the handler within milliseconds and
// an idle consumer sends one request per 20s. Against a server without long polling, or with
// it turned off, after an empty read Consume waits a random duration between half and all of
// min·2ⁿ (n empty reads in a row), capped at max (WithBackoff; 200ms and 10s by default). A
// non-empty read resets the wait. Every wait ends at once when ctx is cancelled.
//
// Errors: a transient error (IsTransient) of a read or trim is retried after the same kind of
// wait, or after the server's Retry-After when it sent one (429, 503). A permanent error is
// returned. Trims use the batch's offset (TrimAt), so a trim whose outcome is unknown is
// simply repeated: it removes nothing more. Against a server without offsets a trim is not
// idempotent, so one whose outcome is unknown is never simply repeated: Consume reads the
// queue first and trims again only if the batch is still at its front. Either way events that
// arrived behind the batch are never removed unprocessed. If the queue was rebuilt since the
// read (the server refuses the offset), the batch counts as done and Consume reads again; the
// rebuilt queue may deliver some of its events a second time.
//
// Handler errors: when handler returns an error, Consume returns that error unchanged and
// does not trim — the batch is delivered again by the next read (at least once).
//
// Cancellation: Consume returns nil when ctx is cancelled while it reads, waits or retries;
// a batch the handler has not finished is left in the queue. The handler receives ctx and
// should return its error (and so keep its batch in the queue) when it cannot finish. If it
// returns nil after ctx was cancelled, the batch is done and Consume still sends one trim,
// bounded by FinalTrimTimeout, so that a clean shutdown does not re-deliver it; if that trim
// fails its error is returned.
func (c *Client) Consume(ctx context.Context, handler func(ctx context.Context, batch Batch) error) error {
	b := backoff{min: c.minBackoff, max: c.maxBackoff, jitter: c.jitter}
	for {
		batch, err := c.ReadWait(ctx, c.longPoll)
		switch {
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
		case batch.Count == 0:
			if batch.HasOffset && c.longPoll >= time.Second {
				continue // the server waited for us
			}
			if c.wait(ctx, &b, nil) != nil {
				return nil
			}
			continue
		}
		b.reset()
		if err := handler(ctx, batch); err != nil {
			return err
		}
		if err := c.ack(ctx, &b, batch); err != nil {
			return err
		}
	}
}

// ack trims batch, which the handler has finished, retrying transient errors. After a failed
// attempt it re-reads to learn whether the server applied it.
func (c *Client) ack(ctx context.Context, b *backoff, batch Batch) error {
	uncertain := false // a trim was sent and failed: it may or may not have been applied
	return c.persist(ctx, b, FinalTrimTimeout, fmt.Sprintf("the finished batch of %d events stays in the queue", batch.Count),
		func(ctx context.Context) error {
			err := c.trimOnce(ctx, batch, uncertain)
			uncertain = uncertain || err != nil
			return err
		})
}

// persist runs attempt until it succeeds, repeating it after transient errors with b's
// back-off, and returns a permanent error as it is. Once ctx is cancelled it makes one last
// attempt bounded by final, so that work the handler finished is still settled; if that one
// fails, the error says what is left undone (lost).
func (c *Client) persist(ctx context.Context, b *backoff, final time.Duration, lost string, attempt func(context.Context) error) error {
	for ctx.Err() == nil {
		err := attempt(ctx)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			break
		}
		if !IsTransient(err) {
			return err
		}
		if c.wait(ctx, b, err) != nil {
			break
		}
	}
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), final)
	defer cancel()
	if err := attempt(tctx); err != nil {
		return fmt.Errorf("cancelled: %s: %w", lost, err)
	}
	return nil
}

// trimOnce trims batch: with its offset when it has one, else batch.Count events, first
// checking with a read that the batch is still at the front of the queue when verify is set.
func (c *Client) trimOnce(ctx context.Context, batch Batch, verify bool) error {
	if batch.HasOffset {
		err := c.TrimAt(ctx, batch.Count, batch.Offset)
		if IsOffsetAhead(err) {
			c.log.WarnContext(ctx, "eventq client: the queue was rebuilt since the read; reading again", "offset", batch.Offset)
			return nil
		}
		return err
	}
	if verify {
		front, err := c.Read(ctx)
		if err != nil {
			return err
		}
		if !startsWith(front, batch) {
			c.log.InfoContext(ctx, "eventq client: an earlier trim was applied", "count", batch.Count)
			return nil
		}
	}
	return c.Trim(ctx, batch.Count)
}

// startsWith reports whether q begins with the events of batch, in order. Event ids are unique,
// so after a trim of batch the queue no longer does.
func startsWith(q, batch Batch) bool {
	if len(q.Events) < len(batch.Events) {
		return false
	}
	for i, e := range batch.Events {
		if q.Events[i].ID != e.ID {
			return false
		}
	}
	return true
}

// wait sleeps before the next attempt: the server's Retry-After when cause carries one, else
// the next back-off. It returns ctx.Err() when ctx ends first.
func (c *Client) wait(ctx context.Context, b *backoff, cause error) error {
	d := b.next()
	if ae, ok := errors.AsType[*APIError](cause); ok && ae.RetryAfter > 0 {
		d = ae.RetryAfter
	}
	if cause != nil {
		c.log.WarnContext(ctx, "eventq client: transient error, retrying", "err", cause, "wait", d)
	} else {
		c.log.DebugContext(ctx, "eventq client: queue empty, waiting", "wait", d)
	}
	return c.sleep(ctx, d)
}

// sleepContext waits d or until ctx is done.
func sleepContext(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// backoff is capped exponential back-off with "equal jitter": the n-th wait in a row is a
// random duration in [d/2, d] where d = min·2ⁿ⁻¹, capped at max.
type backoff struct {
	min, max time.Duration
	cur      time.Duration // the next d; 0 after reset
	jitter   func(n time.Duration) time.Duration
}

func (b *backoff) next() time.Duration {
	d := min(max(b.cur, b.min), b.max)
	if d > b.max/2 {
		b.cur = b.max
	} else {
		b.cur = 2 * d
	}
	half := d / 2
	return d - half + b.jitter(half+1)
}

func (b *backoff) reset() { b.cur = 0 }
