package delivery

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/eventq/eventq/internal/eventqueue"
	"github.com/eventq/eventq/internal/eventstore"
	"github.com/eventq/eventq/models"
)

// RequeueMinAge is how old a pending event must be before Requeue pushes it. The API clears
// the mark right after its own append; waiting this long keeps Requeue from doing the work of
// an in-flight request, so only a failed append or a crash leads to a push by the worker.
// (Pushing such an event would not queue it twice: appends are deduplicated.)
const RequeueMinAge = 30 * time.Second

// requeueAppendBy bounds the time from reading a batch of pending events to appending it:
// an event whose pending mark another process cleared meanwhile must still find its
// deduplication entry, which lives eventqueue.DedupGrace after that.
const requeueAppendBy = eventqueue.DedupGrace / 2

const requeueBatch = 500

// Requeue pushes stored events that are still marked pending to their tenants' queues, oldest
// first, and clears the mark: first every pending event of the tenants whose queue was full
// (eventqueue.HeldKey), whatever its age, while their queue has room, releasing the hold once
// none is left; then, for every other tenant, the events older than minAge (a failed append,
// a crash). Events of a tenant whose flag has been switched off since are unmarked without a
// push. Events already in their queue (the process that appended them died before clearing the
// mark) are not appended again. Concurrent callers on Postgres skip each other's rows. It
// returns how many events it pushed.
func (d *Service) Requeue(ctx context.Context, minAge time.Duration) (int, error) {
	total := 0
	full := map[uint64]bool{} // tenants whose queue filled up during this call
	// Pending batches as old are those whose pusher died or failed: their events are marked
	// and pushed below, with the marked events of the same age.
	if err := d.Held().Claim(ctx, 0, d.clock.Now().UTC().Add(-minAge)); err != nil {
		return 0, err
	}
	held, err := d.queue.HeldTenants(ctx)
	if err != nil {
		return 0, fmt.Errorf("delivery: requeue: %w", err)
	}
	lengths := map[string]int64{}
	for _, t := range held {
		n, err := d.drainHeld(ctx, t, full, false)
		total += n
		if err != nil {
			return total, err
		}
		if full[t] {
			if lengths[models.FormatID(t)], err = d.queue.Len(ctx, t); err != nil {
				return total, err
			}
		}
	}
	d.metrics.HeldQueues(lengths)
	for {
		n, more, err := d.requeueBatch(ctx, requeueScope{cutoff: d.clock.Now().UTC().Add(-minAge), full: full, skip: map[uint64]bool{}})
		total += n
		if err != nil || !more {
			return total, err
		}
	}
}

// DrainHeld pushes tenant's pending events in order while its queue has room, and releases
// its hold mark once none is left. While another process drains the tenant (the worker's
// re-pusher), it waits for that drain to end and then drains what is left, so that when it
// returns the tenant's backlog is in its queue as far as the queue has room. A rebuild ends
// with it. It returns how many it pushed.
func (d *Service) DrainHeld(ctx context.Context, tenant uint64) (int, error) {
	return d.drainHeld(ctx, tenant, map[uint64]bool{}, true)
}

// heldDrainPoll is how often a drain that waits for another process's looks at its lock.
const heldDrainPoll = 50 * time.Millisecond

// drainHeld pushes tenant's pending events in order while its queue has room, and releases its
// hold mark once none is left: again while events were held meanwhile, a few rounds at most. One
// process at a time drains a tenant (the held-drain lock; another caller returns at once, or
// with wait waits for the lock), and none while the tenant has spooled events, which are older
// than every pending one. Its reads
// wait for events a pass over every tenant has locked (see eventstore.Tx.Oldest), so that a short read
// means the backlog's end.
func (d *Service) drainHeld(ctx context.Context, tenant uint64, full map[uint64]bool, wait bool) (int, error) {
	if spooled, err := d.queue.Spooled(ctx, tenant); err != nil || spooled {
		return 0, err
	}
	owner := newOwner()
	for {
		ok, err := d.queue.LockHeldDrain(ctx, tenant, owner, heldDrainLockTTL)
		if err != nil || (!ok && !wait) {
			return 0, err
		}
		if ok {
			break
		}
		select { // real time: the other drain's pace is the database's and Redis's
		case <-time.After(heldDrainPoll):
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	defer d.queue.UnlockHeldDrain(context.WithoutCancel(ctx), tenant, owner)
	total := 0
	for round := 0; round < heldDrainRounds; round++ {
		mark, err := d.queue.HoldMark(ctx, tenant) // read before the rows: see ReleaseHold
		if err != nil {
			return total, fmt.Errorf("delivery: requeue: %w", err)
		}
		// Every pending batch of the tenant, whatever its age, so that its events go in in
		// order with the marked ones, and no pusher marks them again once they are drained.
		if err := d.Held().Claim(ctx, tenant, d.clock.Now().UTC().Add(time.Hour)); err != nil {
			return total, err
		}
		for {
			n, more, err := d.requeueBatch(ctx, requeueScope{cutoff: d.clock.Now().UTC().Add(time.Hour), tenant: tenant, full: full, skip: map[uint64]bool{}})
			total += n
			if err != nil || full[tenant] {
				return total, err
			}
			if !more {
				break
			}
		}
		released, err := d.queue.ReleaseHold(ctx, tenant, mark)
		if err != nil {
			return total, fmt.Errorf("delivery: requeue: %w", err)
		}
		if released {
			break
		}
		d.queue.LockHeldDrain(ctx, tenant, owner, heldDrainLockTTL) // extended
	}
	return total, nil
}

// heldDrainRounds bounds drainHeld's rounds: events held while it drains (new ones behind the
// mark) are drained at once, up to this many times, instead of at the next requeue.
const heldDrainRounds = 10

// heldDrainLockTTL is how long a held-drain lock lasts unless extended.
const heldDrainLockTTL = time.Minute

func newOwner() string {
	b := make([]byte, 8)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// requeueScope selects the pending events of one requeue batch.
type requeueScope struct {
	cutoff time.Time       // created before
	tenant uint64          // of this tenant only, unless 0
	full   map[uint64]bool // not of these tenants (their queue is full); tenants filling up are added
	// not of these tenants either: they have spooled events (older than their pending ones),
	// or, in the pass over every tenant, a hold mark (drainHeld's); tenants found so are added
	skip map[uint64]bool
}

// skipRequeue reports whether tenant's pending events must wait: it has spooled events, or
// (with heldToo) a hold mark, whose events drainHeld alone appends, in order.
func (d *Service) skipRequeue(ctx context.Context, tenant uint64, heldToo bool) (skip, held bool, err error) {
	if spooled, err := d.queue.Spooled(ctx, tenant); err != nil || spooled {
		return true, false, err
	}
	if !heldToo {
		return false, false, nil
	}
	held, err = d.queue.Held(ctx, tenant)
	return held || err != nil, held, err
}

func (d *Service) requeueBatch(ctx context.Context, scope requeueScope) (pushed int, more bool, err error) {
	var pushErr error
	var done []queuedEvent // pushed (or no longer wanted) and unmarked once run commits
	var marked []uint64    // tenants found with a hold mark
	// The rows read stay locked while they are pushed, where the store locks them
	// (eventstore.Store.Locking), so concurrent workers share the backlog; where it does not, a
	// second worker may push a row again, which the queue's deduplication turns into a no-op.
	err = d.events.Locking(ctx, func(tx eventstore.Tx) error {
		// A tenant is looked at before any of its events is read: a held tenant's events,
		// locked here, would be skipped by its own drain (see eventstore.Tx.Oldest).
		skip := func(t uint64) bool {
			if scope.full[t] || scope.skip[t] {
				return true
			}
			skip, isHeld, err := d.skipRequeue(ctx, t, scope.tenant == 0)
			if skip {
				scope.skip[t], pushErr = true, cmp.Or(err, pushErr)
				if isHeld {
					marked = append(marked, t) // for the next requeue's drainHeld
				}
			}
			return skip
		}
		rows, err := tx.Oldest(scope.cutoff, scope.tenant, skip, requeueBatch)
		if err != nil {
			return fmt.Errorf("delivery: requeue: %w", err)
		}
		appendCtx, cancel := context.WithTimeout(ctx, requeueAppendBy)
		defer cancel()
		more = len(rows) == requeueBatch
		byTenant := map[uint64][]models.TrackedEvent{}
		var order []uint64
		for _, row := range rows {
			t := row.TenantID
			if _, seen := byTenant[t]; !seen {
				order = append(order, t)
			}
			byTenant[t] = append(byTenant[t], row)
		}
		// Each tenant's events are pushed and unmarked together; a tenant whose push fails
		// stays pending without undoing the others (which would push those twice).
		for _, t := range order {
			active, err := d.queueing.Queues(ctx, t)
			if err != nil {
				pushErr = err
				continue
			}
			keep := byTenant[t]
			if active {
				res := d.queue.Drain(appendCtx, d.clock.Now(), batchOf(t, keep))
				if res.Err != nil {
					pushErr = res.Err
					continue
				}
				pushed += res.Appended
				d.metrics.Queued(res.Appended)
				keep = keep[:len(keep)-res.Held] // the held ones stay pending
				if res.Held > 0 {
					scope.full[t] = true
				}
				if res.Marked {
					marked = append(marked, t)
				}
			}
			done = appendQueued(done, t, keep)
		}
		if err := unmarkPending(tx, done); err != nil {
			return fmt.Errorf("delivery: requeue: unmark: %w", err)
		}
		if pushErr != nil {
			more = false
		}
		return nil
	})
	if err == nil {
		d.ack(done)
		err = pushErr
	}
	if len(marked) > 0 { // a mark whose tenant was not recorded (a crash between the two)
		if nerr := d.queue.NoteHeld(ctx, marked...); nerr != nil && err == nil {
			err = fmt.Errorf("delivery: requeue: %w", nerr)
		}
	}
	return pushed, more, err
}
