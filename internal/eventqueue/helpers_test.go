package eventqueue

import (
	"context"
	"fmt"
)

// The package's tests fill and read queues directly with these; other packages' tests use
// internal/eventqueue/queuetest, which cannot be imported here.

// Append pushes events to the back of the tenant's queue in the given order, atomically
// (one RPUSH), without deduplication.
func (s *Store) Append(ctx context.Context, tenantID uint64, events ...[]byte) error {
	if len(events) == 0 {
		return nil
	}
	args := make([]any, len(events))
	for i, e := range events {
		args[i] = e
	}
	if err := s.rdb.RPush(ctx, Key(tenantID), args...).Err(); err != nil {
		return fmt.Errorf("eventqueue: append: %w", err)
	}
	return nil
}

// Read returns up to MaxRead events from the front of the queue, oldest first, without
// removing them (one LRANGE). The strings are the stored JSON documents, untouched.
func (s *Store) Read(ctx context.Context, tenantID uint64) ([]string, error) {
	events, err := s.rdb.LRange(ctx, Key(tenantID), 0, MaxRead-1).Result()
	if err != nil {
		return nil, fmt.Errorf("eventqueue: read: %w", err)
	}
	return events, nil
}

// ReadPage is OpenPage with the page's events read (Page.Fill). The caller releases the page.
func (s *Store) ReadPage(ctx context.Context, tenantID uint64, limit int) (*Page, error) {
	page, err := s.OpenPage(ctx, tenantID, limit)
	if err != nil {
		return nil, err
	}
	if err := page.Fill(); err != nil {
		page.Release()
		return nil, err
	}
	return page, nil
}
