package delivery

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/eventq/eventq/internal/apperr"
	"github.com/eventq/eventq/internal/database"
	"github.com/eventq/eventq/internal/erasure"
	"github.com/eventq/eventq/internal/eventqueue"
	"github.com/eventq/eventq/models"
)

// Ingestion through a database outage. When the database cannot store a request's rows (it
// is unreachable, or does not answer within spoolAfter), Ingest keeps them in the spool in
// Redis (eventqueue.Store.Spool) and answers as if they were committed: the ids are final, and
// so are the rows, created_at included. DrainSpool, in the worker, stores them once the
// database answers: inserted by id, so that a row stored twice (a drain repeated after a
// crash, or a slow commit that succeeded after its request was spooled) is stored once, and
// queued once (see reqAbandoned); and queued
// through the tenant's hold mark, which Spool sets: rows of the tenant stored directly
// meanwhile are held behind it, the spooled rows are stored pending, and the held events'
// drain appends every pending row of the tenant in created_at order once its spool is empty.

// spoolAfter is how long Ingest waits for a commit before it spools the request: a database
// that hangs rather than refuses (a restart's recovery holds new connections for a second or
// so) still gets the request answered within two seconds, the spool's write included.
const spoolAfter = time.Second

// spoolDrainEntries and spoolDrainEvents bound one step of DrainSpool: the spooled requests
// it reads (of up to 100 events each), and the events it stores in one transaction.
const (
	spoolDrainEntries = 10000
	spoolDrainEvents  = 10000
)

// spoolStoresInFlight is how many steps of a drain are stored at once.
const spoolStoresInFlight = 3

// spoolLockTTL is how long a drainer holds the spool's lock without extending it.
const spoolLockTTL = 30 * time.Second

// errSpoolFull answers a request when the spool holds INGEST_SPOOL_MAX events.
var errSpoolFull = &apperr.Error{Code: apperr.Unavailable, Message: "Service Unavailable."}

// errCommitSlow is a commit that did not answer within spoolAfter.
var errCommitSlow = errors.New("delivery: the database did not answer in time")

// spoolable reports whether a failed commit's request should go to the spool.
func (d *Service) spoolable(err error) bool {
	return d.limits.Events > 0 && (errors.Is(err, errCommitSlow) || database.Unavailable(err))
}

// spool keeps rows of tenant in the spool (whether they are queued is decided when they are
// stored: the entry does not keep it). On failure it returns cause (the database's error,
// which the caller would have answered) unless the spool is full.
func (d *Service) spool(ctx context.Context, tenant uint64, rows []models.TrackedEvent, cause error) error {
	entry := encodeSpoolEntry(make([]byte, 0, 256*len(rows)), rows)
	switch err := d.queue.Spool(ctx, tenant, entry, len(rows), d.spoolLimits()); {
	case errors.Is(err, eventqueue.ErrSpoolFull):
		d.log.Warn("delivery: the ingestion spool is full, in all or for the tenant; request refused", "tenant_id", tenant, "events", len(rows))
		return errSpoolFull
	case err != nil:
		d.log.Warn("delivery: database and spool both failed", "tenant_id", tenant, "db_err", cause, "spool_err", err)
		return cause
	}
	d.metrics.Spooled(len(rows))
	return nil
}

// spoolLimits are the spool's bounds; a zero TenantEvents or Bytes bounds nothing.
func (d *Service) spoolLimits() eventqueue.SpoolLimits {
	lim := d.limits
	if lim.TenantEvents <= 0 {
		lim.TenantEvents = math.MaxInt64
	}
	if lim.Bytes <= 0 {
		lim.Bytes = math.MaxInt64
	}
	return lim
}

// DrainSpool stores the spooled requests of every tenant, oldest first, and returns how many
// events it stored. One caller at a time across all processes drains (the others return 0 at
// once); owner names the caller. It returns at the first error (the database still down), to
// be called again.
func (d *Service) DrainSpool(ctx context.Context, owner string) (int, error) {
	tenants, err := d.queue.SpoolTenants(ctx)
	if err != nil || len(tenants) == 0 {
		if n, _ := d.queue.SpoolEvents(ctx); err == nil && n > 0 {
			err = d.queue.SpoolResetCount(ctx) // a count a crash left behind
		}
		return 0, err
	}
	// Not while the database is down: a step appends to the queue before it stores.
	if err := d.db.WithContext(ctx).Exec("SELECT 1").Error; err != nil {
		return 0, fmt.Errorf("delivery: spool: %w", err)
	}
	ok, err := d.queue.LockSpool(ctx, owner, spoolLockTTL)
	if err != nil || !ok {
		return 0, err
	}
	defer d.queue.UnlockSpool(context.WithoutCancel(ctx), owner)
	total := 0
	var unavailable error
	for _, t := range tenants {
		n, err := d.drainTenantSpool(ctx, t, owner)
		total += n
		switch {
		case err != nil && database.Unavailable(err):
			// The tenant's node is down (a Citus worker node): the other tenants drain.
			unavailable = cmp.Or(unavailable, err)
		case err != nil:
			return total, err
		}
	}
	return total, unavailable
}

// drainTenantSpool stores tenant's spooled requests in order, marked pending when its events
// are queued, then forgets the tenant and drains its held events: every pending event of the
// tenant goes to the queue in created_at order, the spooled and those stored directly
// meanwhile together. The spool is in acceptance order, but not ahead of every held event: a
// tenant's requests can be spooled and stored directly in turn (a commit too slow for one api,
// the next request committed at once by another, the one after spooled again), so appending
// the spooled events first would put them ahead of held ones accepted before them.
func (d *Service) drainTenantSpool(ctx context.Context, tenant uint64, owner string) (int, error) {
	queued, err := d.queueing.Queues(ctx, tenant)
	if err != nil {
		return 0, err
	}
	gone, err := d.erasedInSpool(ctx, tenant)
	if err != nil {
		return 0, err
	}
	total := 0
	// Steps overlap: up to spoolStoresInFlight are stored at once (COPYs on their own
	// connections) while the next is read from Redis. A step leaves the spool once it and
	// every step before it are stored; a drain repeated after a crash stores what is missing.
	type storing struct {
		spoolStep
		done chan error
	}
	var inflight []storing
	offset := 0 // entries taken by the steps in flight, not dropped yet
	step, err := d.readSpoolStep(ctx, tenant, 0, queued, gone)
	for err == nil && (step.taken > 0 || len(inflight) > 0) {
		if step.taken > 0 && len(inflight) < spoolStoresInFlight {
			st := storing{step, make(chan error, 1)}
			go func() { st.done <- d.events.InsertOnce(ctx, st.rows) }()
			inflight, offset = append(inflight, st), offset+step.taken
			step, err = d.readSpoolStep(ctx, tenant, offset, queued, gone)
			continue
		}
		// Out of inflight before its outcome is read: after a failure the steps still in
		// flight are waited for, and this one's outcome is read only once.
		first := inflight[0]
		inflight, offset = inflight[1:], offset-first.taken
		if err = <-first.done; err != nil {
			err = fmt.Errorf("delivery: spool: store: %w", err)
			break
		}
		if _, err = d.queue.SpoolDrop(ctx, tenant, first.taken, first.events, first.bytes); err != nil {
			break
		}
		total += len(first.rows)
		d.metrics.Unspooled(first.events)
		if _, err = d.queue.LockSpool(ctx, owner, spoolLockTTL); err != nil {
			break
		}
	}
	for _, st := range inflight { // after a failure: their outcome is not needed, their end is
		<-st.done
	}
	if err != nil {
		return total, err
	}
	if err := d.queue.SpoolForget(ctx, tenant); err != nil {
		return total, err
	}
	_, err = d.DrainHeld(ctx, tenant)
	return total, err
}

// spoolStep is one step of a drain: the spooled requests it takes, their bytes and events,
// and the rows to store (without those of erased members).
type spoolStep struct {
	taken, bytes, events int
	rows                 []models.TrackedEvent
}

// readSpoolStep reads tenant's spooled requests from offset on, up to spoolDrainEvents events
// (an entry that cannot be read is logged and taken, adding no row), with their queued flags.
// The rows of gone's sessions are dropped (nil: none).
func (d *Service) readSpoolStep(ctx context.Context, tenant uint64, offset int, queued bool, gone map[string]bool) (spoolStep, error) {
	entries, err := d.queue.SpoolRange(ctx, tenant, offset, spoolDrainEntries)
	if err != nil {
		return spoolStep{}, err
	}
	var step spoolStep
	for _, raw := range entries {
		if step.events >= spoolDrainEvents {
			break
		}
		step.taken++
		step.bytes += len(raw)
		n := len(step.rows)
		if step.rows, err = decodeSpoolEntry(step.rows, []byte(raw)); err != nil {
			d.log.Error("delivery: spool: an entry that cannot be read is dropped", "tenant_id", tenant, "err", err)
		}
		step.events += len(step.rows) - n
	}
	if len(gone) > 0 {
		step.rows = slices.DeleteFunc(step.rows, func(r models.TrackedEvent) bool { return gone[r.SessionID] })
	}
	for i := range step.rows {
		step.rows[i].TenantID = tenant
		step.rows[i].Queued, step.rows[i].QueuePending = queued, queued
	}
	return step, nil
}

// erasedInSpool returns the sessions of tenant's spooled events that name an erased member
// (nil when there are none): an erasure waits for the spool to drain, and the drain drops
// those events and every other event of their sessions, so that nothing of the member is
// stored or queued after the erasure is done. Only a tenant with erased members is read
// through.
func (d *Service) erasedInSpool(ctx context.Context, tenant uint64) (map[string]bool, error) {
	er, err := erasure.LoadErased(ctx, d.db, tenant)
	if err != nil || er.None() {
		return nil, err
	}
	taken := func(ext string) bool { return erasure.ExternalTaken(ctx, d.db, tenant, ext) }
	var gone map[string]bool
	for offset := 0; ; offset += spoolDrainEntries {
		entries, err := d.queue.SpoolRange(ctx, tenant, offset, spoolDrainEntries)
		if err != nil {
			return nil, err
		}
		for _, raw := range entries {
			rows, _ := decodeSpoolEntry(nil, []byte(raw)) // an entry that cannot be read stores nothing
			for _, r := range rows {
				if r.AudienceMemberID != nil && er.Names(*r.AudienceMemberID, taken) {
					if gone == nil {
						gone = map[string]bool{}
					}
					gone[r.SessionID] = true
				}
			}
		}
		if len(entries) < spoolDrainEntries {
			return gone, nil
		}
	}
}
