package held

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/eventq/eventq/models"
)

// MarkUntrimmed marks pending every stored event of tenant that was queued after front (the
// trim log's record of the queue's front), and counts them: what a rebuild puts back.
func (s *Store) MarkUntrimmed(ctx context.Context, tenant uint64, front models.QueueFront) (int64, error) {
	q := s.DB.WithContext(ctx).Model(&models.TrackedEvent{}).Where("tenant_id = ? AND queued = ?", tenant, true)
	if front.TrimmedThrough != "" {
		q = q.Where("id > ?", front.TrimmedThrough)
		// Ids sort by time: bound the scan on the (tenant_id, created_at) index.
		if at, ok := s.createdAt(ctx, tenant, front.TrimmedThrough); ok {
			q = q.Where("created_at >= ?", at.Add(-time.Hour))
		}
	}
	res := q.UpdateColumn("queue_pending", true)
	if res.Error != nil {
		return 0, fmt.Errorf("held: mark untrimmed events: %w", res.Error)
	}
	return res.RowsAffected, nil
}

// idTimeSlack is how far from the time in its UUID v7 an event's created_at is looked for
// first: the two are taken from clocks a moment apart.
const idTimeSlack = time.Hour

// createdAt looks up the created_at of tenant's stored event id. It first looks near the time
// in the id (a UUID v7), which on Postgres confines the lookup to that day's partitions, and
// only then everywhere.
func (s *Store) createdAt(ctx context.Context, tenant uint64, id string) (time.Time, bool) {
	var rows []models.TrackedEvent
	q := func() *gorm.DB {
		return s.DB.WithContext(ctx).Select("created_at").Where("tenant_id = ? AND id = ?", tenant, id).Limit(1)
	}
	if u, err := uuid.Parse(id); err == nil && u.Version() == 7 {
		sec, nsec := u.Time().UnixTime()
		at := time.Unix(sec, nsec).UTC()
		if err := q().Where("created_at BETWEEN ? AND ?", at.Add(-idTimeSlack), at.Add(idTimeSlack)).Find(&rows).Error; err == nil && len(rows) == 1 {
			return rows[0].CreatedAt, true
		}
	}
	if err := q().Find(&rows).Error; err == nil && len(rows) == 1 {
		return rows[0].CreatedAt, true
	}
	return time.Time{}, false
}
