package tracking

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/eventq/eventq/internal/apperr"
	"github.com/eventq/eventq/internal/database"
	"github.com/eventq/eventq/internal/eventqueue"
	"github.com/eventq/eventq/models"
)

// Ingestion through a database outage. When the database cannot store a request's rows (it
// is unreachable, or does not answer within spoolAfter), Ingest keeps them in the spool in
// Redis (eventqueue.Store.Spool) and answers as if they were committed: the ids are final, and
// so are the rows, created_at included. DrainSpool, in the worker, stores them once the
// database answers: inserted by id, so that a row stored twice (a drain repeated after a
// crash, or a slow commit that succeeded after its request was spooled) is stored once; and
// queued through the tenant's hold mark, which Spool sets: rows of the tenant stored directly
// meanwhile are held behind it, and the held events' drain appends every pending row of the
// tenant in created_at order once its spool is empty.

// spoolAfter is how long Ingest waits for a commit before it spools the request: a database
// that hangs rather than refuses still gets the request answered within two seconds.
const spoolAfter = 1500 * time.Millisecond

// spoolDrainEntries is how many spooled requests (of up to 100 events) DrainSpool stores in
// one transaction.
const spoolDrainEntries = 50

// spoolLockTTL is how long a drainer holds the spool's lock without extending it.
const spoolLockTTL = 30 * time.Second

// errSpoolFull answers a request when the spool holds INGEST_SPOOL_MAX events.
var errSpoolFull = &apperr.Error{Code: apperr.Unavailable, Message: "Service Unavailable."}

// errCommitSlow is a commit that did not answer within spoolAfter.
var errCommitSlow = errors.New("tracking: the database did not answer in time")

// spoolEntry is one spooled request.
type spoolEntry struct {
	Rows []models.TrackedEvent `json:"rows"`
}

// spoolable reports whether a failed commit's request should go to the spool.
func (in *Ingestor) spoolable(err error) bool {
	return in.SpoolMax > 0 && (errors.Is(err, errCommitSlow) || database.Unavailable(err))
}

// spool keeps rows of tenant in the spool. On failure it returns cause (the database's
// error, which the caller would have answered) unless the spool is full.
func (in *Ingestor) spool(ctx context.Context, tenant uint64, rows []models.TrackedEvent, cause error) error {
	rows = slices.Clone(rows) // a committer may still be writing them (errCommitSlow)
	for i := range rows {     // whether they are queued is decided when they are stored
		rows[i].Queued, rows[i].QueuePending = false, false
	}
	entry, err := json.Marshal(spoolEntry{Rows: rows})
	if err != nil {
		return fmt.Errorf("tracking: spool: %w", err)
	}
	switch err := in.queue.Spool(ctx, tenant, entry, len(rows), in.SpoolMax); {
	case errors.Is(err, eventqueue.ErrSpoolFull):
		in.log.Warn("tracking: the ingestion spool is full; request refused", "tenant_id", tenant, "events", len(rows))
		return errSpoolFull
	case err != nil:
		in.log.Warn("tracking: database and spool both failed", "tenant_id", tenant, "db_err", cause, "spool_err", err)
		return cause
	}
	in.metrics.Spooled(len(rows))
	return nil
}

// DrainSpool stores the spooled requests of every tenant, oldest first, and returns how many
// events it stored. One caller at a time across all processes drains (the others return 0 at
// once); owner names the caller. It returns at the first error (the database still down), to
// be called again.
func (in *Ingestor) DrainSpool(ctx context.Context, owner string) (int, error) {
	tenants, err := in.queue.SpoolTenants(ctx)
	if err != nil || len(tenants) == 0 {
		if n, _ := in.queue.SpoolEvents(ctx); err == nil && n > 0 {
			err = in.queue.SpoolResetCount(ctx) // a count a crash left behind
		}
		return 0, err
	}
	ok, err := in.queue.LockSpool(ctx, owner, spoolLockTTL)
	if err != nil || !ok {
		return 0, err
	}
	defer in.queue.UnlockSpool(context.WithoutCancel(ctx), owner)
	total := 0
	for _, t := range tenants {
		n, err := in.drainTenantSpool(ctx, t, owner)
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// drainTenantSpool stores tenant's spooled requests in order, then forgets the tenant and
// drains its held events, the spooled ones first.
func (in *Ingestor) drainTenantSpool(ctx context.Context, tenant uint64, owner string) (int, error) {
	total := 0
	for {
		entries, err := in.queue.SpoolFront(ctx, tenant, spoolDrainEntries)
		if err != nil {
			return total, err
		}
		if len(entries) == 0 {
			break
		}
		queued, err := in.queueing.Queues(ctx, tenant)
		if err != nil {
			return total, err
		}
		var rows []models.TrackedEvent
		for _, raw := range entries {
			var e spoolEntry
			if err := json.Unmarshal([]byte(raw), &e); err != nil {
				in.log.Error("tracking: spool: an entry that cannot be read is dropped", "tenant_id", tenant, "err", err)
				continue
			}
			rows = append(rows, e.Rows...)
		}
		for i := range rows {
			rows[i].TenantID = tenant
			rows[i].Queued, rows[i].QueuePending = queued, queued
		}
		if err := insertOnce(ctx, in.db, rows); err != nil {
			return total, fmt.Errorf("tracking: spool: store: %w", err)
		}
		if _, err := in.queue.SpoolDrop(ctx, tenant, len(entries), len(rows)); err != nil {
			return total, err
		}
		total += len(rows)
		in.metrics.Unspooled(len(rows))
		if _, err := in.queue.LockSpool(ctx, owner, spoolLockTTL); err != nil {
			return total, err
		}
	}
	if err := in.queue.SpoolForget(ctx, tenant); err != nil {
		return total, err
	}
	_, err := in.DrainHeld(ctx, tenant)
	return total, err
}

// insertOnce inserts rows in one transaction, skipping those whose id (and created_at, the
// partition key on Postgres) is stored already.
func insertOnce(ctx context.Context, db *gorm.DB, rows []models.TrackedEvent) error {
	if len(rows) == 0 {
		return nil
	}
	return db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		return tx.Clauses(clause.OnConflict{DoNothing: true}).CreateInBatches(rows, 500).Error
	})
}
