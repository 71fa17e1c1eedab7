// Package export writes a tenant's stored events out of the database as JSON lines or as a
// Parquet file, streaming: the events are read a page at a time, so memory does not grow with
// their number.
package export

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"gorm.io/gorm"

	"github.com/eventq/eventq/models"
)

// DefaultPageSize is how many events one query reads when Query.PageSize is zero.
const DefaultPageSize = 5000

// Query selects the events to export: those of TenantID created at or after From and before
// To, oldest first (by created_at, then id).
type Query struct {
	TenantID uint64
	// From is the inclusive lower bound; the zero time means no lower bound.
	From time.Time
	// To is the exclusive upper bound; the zero time means no upper bound.
	To time.Time
	// PageSize is how many events each query reads; zero means DefaultPageSize.
	PageSize int
	// Members, when not empty, keeps only the events whose audience_member_id is one of them.
	Members []string
}

// ErrEmptyRange is returned, before anything is read or written, for a Query whose From is
// not before its To.
var ErrEmptyRange = errors.New("--from must be before --to")

// Validate returns ErrEmptyRange when both bounds are set and From is not before To.
func (q Query) Validate() error {
	if !q.From.IsZero() && !q.To.IsZero() && !q.From.Before(q.To) {
		return ErrEmptyRange
	}
	return nil
}

// JSONL writes each selected event to w as the exact bytes of its queue form
// ((*models.TrackedEvent).MarshalQueue) followed by a newline, and returns how many it wrote.
// An invalid query writes nothing. Output is buffered and flushed before JSONL returns.
func JSONL(ctx context.Context, db *gorm.DB, w io.Writer, q Query) (int, error) {
	if err := q.Validate(); err != nil {
		return 0, err
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	n, err := eachPage(ctx, db, q, func(page []models.TrackedEvent) error {
		for i := range page {
			if _, err := bw.Write(append(page[i].MarshalQueue(), '\n')); err != nil {
				return fmt.Errorf("export: write: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return n, err
	}
	if err := bw.Flush(); err != nil {
		return n, fmt.Errorf("export: write: %w", err)
	}
	return n, nil
}

// Each calls fn with every selected event, oldest first, a page at a time (as JSONL reads
// them), and returns how many it passed. fn must not keep the event.
func Each(ctx context.Context, db *gorm.DB, q Query, fn func(*models.TrackedEvent) error) (int, error) {
	if err := q.Validate(); err != nil {
		return 0, err
	}
	return eachPage(ctx, db, q, func(page []models.TrackedEvent) error {
		for i := range page {
			if err := fn(&page[i]); err != nil {
				return err
			}
		}
		return nil
	})
}

// eventColumns are the columns an export reads: the queue event's, nothing else.
const eventColumns = "id, type, session_id, audience_member_id, url, page_hostname, page_path, " +
	"user_agent, ip_address, event_sequence, created_at"

// eachPage calls fn with successive pages of the selected events, oldest first, and returns
// how many events it passed. Every page is its own short query, positioned after the last
// event of the previous page (keyset pagination on created_at, id), so no transaction or
// cursor stays open between pages and an event is never passed twice. fn must not keep the
// page: its backing array is reused.
func eachPage(ctx context.Context, db *gorm.DB, q Query, fn func([]models.TrackedEvent) error) (int, error) {
	size := q.PageSize
	if size <= 0 {
		size = DefaultPageSize
	}
	var (
		total int
		page  = make([]models.TrackedEvent, 0, size)
		last  *models.TrackedEvent
	)
	for {
		stmt := db.WithContext(ctx).Model(&models.TrackedEvent{}).Select(eventColumns).
			Where("tenant_id = ?", q.TenantID)
		if len(q.Members) > 0 {
			stmt = stmt.Where("audience_member_id IN ?", q.Members)
		}
		// The created_at bounds are always in the query when known: they keep each page a range
		// scan of the (tenant_id, created_at) index and let Postgres skip partitions outside them.
		switch {
		case last != nil:
			// The cursor is passed as read, not converted to UTC, so that on SQLite (where
			// created_at is text) it compares equal to the stored value it came from.
			stmt = stmt.Where("created_at >= ? AND (created_at > ? OR (created_at = ? AND id > ?))",
				last.CreatedAt, last.CreatedAt, last.CreatedAt, last.ID)
		case !q.From.IsZero():
			stmt = stmt.Where("created_at >= ?", q.From.UTC())
		}
		if !q.To.IsZero() {
			stmt = stmt.Where("created_at < ?", q.To.UTC())
		}
		page = page[:0]
		if err := stmt.Order("created_at, id").Limit(size).Find(&page).Error; err != nil {
			return total, fmt.Errorf("export: read events: %w", err)
		}
		if len(page) == 0 {
			return total, nil
		}
		if err := fn(page); err != nil {
			return total, err
		}
		total += len(page)
		if len(page) < size {
			return total, nil
		}
		next := page[len(page)-1]
		if last != nil && (next.ID == last.ID || next.CreatedAt.Before(last.CreatedAt)) {
			// Cannot happen with a consistent ordering; refuse to loop forever if it does.
			return total, fmt.Errorf("export: the page after event %s did not move past it", last.ID)
		}
		last = &next
	}
}

// Latest returns tenantID's limit newest stored events, oldest first.
func Latest(ctx context.Context, db *gorm.DB, tenantID uint64, limit int) ([]models.TrackedEvent, error) {
	var rows []models.TrackedEvent
	err := db.WithContext(ctx).Where("tenant_id = ?", tenantID).Order("created_at DESC, id DESC").Limit(limit).Find(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("export: latest: %w", err)
	}
	slices.Reverse(rows)
	return rows, nil
}

// Exporter reads stored events for the HTTP routes, which hold no database of their own.
type Exporter struct{ db *gorm.DB }

// New returns an Exporter on db.
func New(db *gorm.DB) *Exporter { return &Exporter{db: db} }

// Each is Each on the Exporter's database.
func (e *Exporter) Each(ctx context.Context, q Query, fn func(*models.TrackedEvent) error) (int, error) {
	return Each(ctx, e.db, q, fn)
}
