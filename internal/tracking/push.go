package tracking

import (
	"context"
	"database/sql/driver"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/eventq/eventq/internal/database"
	"github.com/eventq/eventq/internal/eventqueue"
	"github.com/eventq/eventq/models"
)

// A committed event marked pending reaches its queue through push, right after the commit,
// or through Requeue, later. Both append with eventqueue.AppendOnce, so an event already in
// its queue is never appended again, whoever tries and however often. After the append the
// pending mark is cleared in the background (unmarkLoop), then the append is acknowledged to
// the queue (Ack), which lets its deduplication entry expire.

// AppendTimeout bounds a request's Redis round trip: past it the request is answered and its
// events stay pending for the re-pusher. breakerCooldown is how long appends are not even
// tried after a failure, so that an outage costs the requests behind it nothing.
const (
	AppendTimeout   = 500 * time.Millisecond
	breakerCooldown = time.Second
)

// queuedEvent is an appended event whose pending mark is to be cleared.
type queuedEvent struct {
	tenant uint64
	id     string
	at     time.Time // created_at: bounds the update to its day partitions on Postgres
}

// PushPending appends committed rows marked QueuePending to the tenant's queue, in order, and
// clears their mark. If the append fails the rows stay marked and Requeue pushes them later;
// the failure is logged, not returned, because the events are safe in the database.
func (in *Ingestor) PushPending(ctx context.Context, tenantID uint64, rows []models.TrackedEvent) {
	in.push(ctx, []*commitRequest{{tenant: tenantID, rows: rows, queued: true}})
}

// push appends the queued rows of the stored requests to their tenants' queues, one atomic
// append per tenant in one round trip: a tenant's rows from every request of the batch, in the
// batch's order, so that requests of one tenant cost Redis one script call rather than one
// each. It schedules clearing the marks of those appended. Rows held back (their queue is
// full) stay pending: Requeue appends them as the queue drains.
func (in *Ingestor) push(ctx context.Context, stored []*commitRequest) {
	var batches []eventqueue.Batch
	var rows [][]models.TrackedEvent // rows[i] are the rows of batches[i]
	byTenant := map[uint64]int{}     // tenant -> its index in batches
	for _, r := range stored {
		if !r.queued {
			continue
		}
		i, ok := byTenant[r.tenant]
		if !ok {
			i = len(batches)
			byTenant[r.tenant] = i
			batches = append(batches, eventqueue.Batch{TenantID: r.tenant})
			rows = append(rows, nil)
		}
		batches[i].Events = appendEvents(batches[i].Events, r.rows)
		rows[i] = append(rows[i], r.rows...)
	}
	if len(batches) == 0 {
		return
	}
	now := in.clock.Now()
	if !in.breaker.Allow(now) {
		return // Redis failed a moment ago: the events stay pending for Requeue
	}
	ctx, cancel := context.WithTimeout(ctx, AppendTimeout)
	defer cancel()
	var done []queuedEvent
	var heldTenants []uint64
	failed, appended, held := 0, 0, 0
	for i, res := range in.queue.AppendOnce(ctx, now, batches) {
		b := batches[i]
		if res.Err != nil {
			failed += len(b.Events)
			in.log.Warn("tracking: queue append failed; the worker will push the events", "tenant_id", b.TenantID, "events", len(b.Events), "err", res.Err)
			continue
		}
		appended += res.Appended
		if res.Held > 0 { // the queue is full, or events wait ahead: these stay pending
			held += res.Held
			heldTenants = append(heldTenants, b.TenantID)
		}
		done = appendQueued(done, b.TenantID, rows[i][:len(b.Events)-res.Held])
	}
	if failed > 0 {
		in.breaker.Fail(in.clock.Now())
	}
	in.metrics.Queued(appended)
	in.metrics.Held(held)
	if len(heldTenants) > 0 {
		if err := in.queue.NoteHeld(ctx, heldTenants...); err != nil {
			in.log.Warn("tracking: could not record held tenants; the worker finds them later", "err", err)
		}
	}
	if len(done) > 0 {
		in.unmark(done)
	}
}

// batchOf is the queue batch of tenant's stored rows, in order.
func batchOf(tenant uint64, rows []models.TrackedEvent) eventqueue.Batch {
	return eventqueue.Batch{TenantID: tenant, Events: appendEvents(make([]eventqueue.Event, 0, len(rows)), rows)}
}

// appendEvents appends the queue events of stored rows to events, in order.
func appendEvents(events []eventqueue.Event, rows []models.TrackedEvent) []eventqueue.Event {
	for i := range rows {
		events = append(events, eventqueue.Event{ID: rows[i].ID, JSON: rows[i].MarshalQueue()})
	}
	return events
}

// appendQueued appends tenant's rows to done, as events whose pending mark is to be cleared.
func appendQueued(done []queuedEvent, tenant uint64, rows []models.TrackedEvent) []queuedEvent {
	for i := range rows {
		done = append(done, queuedEvent{tenant, rows[i].ID, rows[i].CreatedAt})
	}
	return done
}

// unmark schedules clearing the pending mark of appended events, batched and off the request
// path. If the process dies first, Requeue finds them pending and AppendOnce skips them.
func (in *Ingestor) unmark(events []queuedEvent) {
	select {
	case in.pushed <- events:
	case <-in.stop:
	}
}

func (in *Ingestor) unmarkLoop() {
	defer in.wg.Done()
	ticker := time.NewTicker(unmarkInterval)
	defer ticker.Stop()
	var events []queuedEvent
	flush := func() {
		for len(events) > 0 {
			n := min(len(events), unmarkChunk(database.IsPostgres(in.db)))
			in.settle(events[:n])
			events = events[n:]
		}
	}
	for {
		select {
		case batch := <-in.pushed:
			events = append(events, batch...)
			if len(events) >= unmarkBatchMaxIDs {
				flush()
			}
		case <-ticker.C:
			flush()
		case <-in.stop:
			for {
				select {
				case batch := <-in.pushed:
					events = append(events, batch...)
				default:
					flush()
					return
				}
			}
		}
	}
}

// settle clears the pending marks of appended events, then acknowledges them to the queue.
func (in *Ingestor) settle(events []queuedEvent) {
	err := in.sqlite.writing(func() error { return unmarkPending(in.db.WithContext(context.Background()), events) })
	if err != nil {
		in.log.Warn("tracking: could not clear pending marks; Requeue will find them appended", "events", len(events), "err", err)
		return
	}
	in.ack(events)
}

// ack tells each tenant's queue that these events are no longer pending in the database.
// A failure only keeps their deduplication entries longer (eventqueue.Retention).
func (in *Ingestor) ack(events []queuedEvent) {
	now := in.clock.Now()
	if !in.breaker.Allow(now) {
		return
	}
	byTenant := map[uint64][]string{}
	for _, e := range events {
		byTenant[e.tenant] = append(byTenant[e.tenant], e.id)
	}
	ctx, cancel := context.WithTimeout(context.Background(), AppendTimeout)
	defer cancel()
	for tenant, ids := range byTenant {
		if err := in.queue.Ack(ctx, now, tenant, ids); err != nil {
			in.log.Warn("tracking: queue ack failed", "tenant_id", tenant, "events", len(ids), "err", err)
			return
		}
	}
}

// unmarkPending clears the pending mark of events. The created_at bounds let Postgres confine
// the update to the day partitions that hold them instead of probing every partition's index.
//
// On Postgres the ids go as one array parameter (id = ANY($1)), not one parameter each: the
// statement is prepared once and cached, and after five runs Postgres keeps a generic plan.
// For id IN ($1, …, $n) that plan scans the whole time range and compares every row with
// every id, 150 ms for 1,000 ids against 9 ms for ANY($1), whose plan probes the primary key.
func unmarkPending(tx *gorm.DB, events []queuedEvent) error {
	if len(events) == 0 {
		return nil
	}
	ids := make([]string, len(events))
	first, last := events[0].at, events[0].at
	for i, e := range events {
		ids[i] = e.id
		if e.at.Before(first) {
			first = e.at
		}
		if e.at.After(last) {
			last = e.at
		}
	}
	// A second of slack on each side: the database may store a coarser time than the row held.
	first, last = first.UTC().Add(-time.Second), last.UTC().Add(time.Second)
	q := tx.Model(&models.TrackedEvent{}).Where("created_at BETWEEN ? AND ?", first, last)
	if database.IsPostgres(tx) {
		q = q.Where("id = ANY(?)", textArray(ids))
	} else {
		q = q.Where("id IN ?", ids)
	}
	return q.UpdateColumn("queue_pending", false).Error
}

// textArray is a Postgres text[] parameter: gorm would spread a plain []string into one
// parameter per element.
type textArray []string

// Value writes the array's text form, every element quoted.
func (a textArray) Value() (driver.Value, error) {
	var b strings.Builder
	b.WriteByte('{')
	for i, s := range a {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('"')
		for _, r := range s {
			if r == '"' || r == '\\' {
				b.WriteByte('\\')
			}
			b.WriteRune(r)
		}
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String(), nil
}
