package eventstore

import (
	"context"
	"fmt"
	"slices"
	"time"

	"gorm.io/gorm"

	"github.com/eventq/eventq/models"
)

// DefaultPageSize is how many events one read of Each takes when Range.PageSize is zero.
const DefaultPageSize = 5000

// Range selects a tenant's stored events: those of TenantID created at or after From and
// before To, oldest first (by created_at, then id).
type Range struct {
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

// readColumns are the columns a read of a range takes: the queue event's, nothing else.
const readColumns = "id, type, session_id, audience_member_id, url, page_hostname, page_path, " +
	"user_agent, ip_address, event_sequence, created_at"

// Pages calls fn with successive pages of the events of r, oldest first, and returns how many
// events it passed. Every page is its own short query, positioned after the last event of the
// previous page (keyset pagination on created_at, id), so no transaction or cursor stays open
// between pages and an event is never passed twice. fn must not keep the page: its backing
// array is reused.
func (s *Store) Pages(ctx context.Context, r Range, fn func([]models.TrackedEvent) error) (int, error) {
	size := r.PageSize
	if size <= 0 {
		size = DefaultPageSize
	}
	var (
		total int
		page  = make([]models.TrackedEvent, 0, size)
		last  *models.TrackedEvent
	)
	if !s.distributed { // Citus's nodes plan their shards themselves
		s.d.analyze(ctx, s.db)
	}
	for {
		stmt := s.db.WithContext(ctx).Model(&models.TrackedEvent{}).Select(readColumns).
			Where("tenant_id = ?", r.TenantID)
		if len(r.Members) > 0 {
			stmt = stmt.Where("audience_member_id IN ?", r.Members)
		}
		// The created_at bounds are always in the query when known: they keep each page a range
		// scan of the (tenant_id, created_at) index and let Postgres skip partitions outside them.
		switch {
		case last != nil:
			// The cursor is passed as read, not converted to UTC, so that on SQLite (where
			// created_at is text) it compares equal to the stored value it came from.
			stmt = stmt.Where("created_at >= ? AND (created_at > ? OR (created_at = ? AND id > ?))",
				last.CreatedAt, last.CreatedAt, last.CreatedAt, last.ID)
		case !r.From.IsZero():
			stmt = stmt.Where("created_at >= ?", r.From.UTC())
		}
		if !r.To.IsZero() {
			stmt = stmt.Where("created_at < ?", r.To.UTC())
		}
		page = page[:0]
		if err := stmt.Order("created_at, id").Limit(size).Find(&page).Error; err != nil {
			return total, fmt.Errorf("eventstore: read events: %w", err)
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
			return total, fmt.Errorf("eventstore: the page after event %s did not move past it", last.ID)
		}
		last = &next
	}
}

// Latest returns tenantID's limit newest stored events, oldest first.
func (s *Store) Latest(ctx context.Context, tenantID uint64, limit int) ([]models.TrackedEvent, error) {
	var rows []models.TrackedEvent
	err := s.db.WithContext(ctx).Where("tenant_id = ?", tenantID).Order("created_at DESC, id DESC").Limit(limit).Find(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("eventstore: latest: %w", err)
	}
	slices.Reverse(rows)
	return rows, nil
}

// Sessions returns the distinct sessions of tenantID's events that name one of members: one
// read of the tenant's events, run so that it leaves ingestion a core.
func (s *Store) Sessions(ctx context.Context, tenantID uint64, members []string) ([]string, error) {
	var sessions []string
	err := s.d.serial(s.db.WithContext(ctx), func(tx *gorm.DB) error {
		return tx.Model(&models.TrackedEvent{}).Where("tenant_id = ? AND audience_member_id IN ?", tenantID, members).
			Distinct().Pluck("session_id", &sessions).Error
	})
	if err != nil {
		return nil, fmt.Errorf("eventstore: sessions: %w", err)
	}
	return sessions, nil
}
