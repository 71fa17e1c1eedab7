// Package queuetest fills and reads tenants' queues directly, for tests and benchmarks.
// Production code appends with eventqueue.Store.AppendOnce (deduplicated) and reads pages with
// eventqueue.Store.OpenPage; these helpers skip both.
package queuetest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/eventq/eventq/internal/eventqueue"
)

// Append pushes events to the back of tenant's queue in the given order, atomically (one
// RPUSH), without deduplication.
func Append(ctx context.Context, rdb redis.Cmdable, tenant uint64, events ...[]byte) error {
	if len(events) == 0 {
		return nil
	}
	args := make([]any, len(events))
	for i, e := range events {
		args[i] = e
	}
	if err := rdb.RPush(ctx, eventqueue.Key(tenant), args...).Err(); err != nil {
		return fmt.Errorf("queuetest: append: %w", err)
	}
	return nil
}

// ReadPage reads up to limit events from the front of tenant's queue, every one of them
// arrived; the caller releases the page.
func ReadPage(ctx context.Context, s *eventqueue.Store, tenant uint64, limit int) (*eventqueue.Page, error) {
	page, err := s.OpenPage(ctx, tenant, limit)
	if err != nil {
		return nil, err
	}
	if err := page.Fill(); err != nil {
		page.Release()
		return nil, err
	}
	return page, nil
}

// Read returns up to eventqueue.MaxRead events from the front of tenant's queue, oldest first,
// as the stored JSON documents (a queue holds only JSON objects).
func Read(ctx context.Context, s *eventqueue.Store, tenant uint64) ([]string, error) {
	page, err := ReadPage(ctx, s, tenant, eventqueue.MaxRead)
	if err != nil {
		return nil, err
	}
	defer page.Release()
	var buf bytes.Buffer
	buf.WriteByte('[')
	if _, err := page.WriteTo(&buf); err != nil {
		return nil, err
	}
	buf.WriteByte(']')
	var events []json.RawMessage // each element's bytes as stored
	if err := json.Unmarshal(buf.Bytes(), &events); err != nil {
		return nil, fmt.Errorf("queuetest: read: %w", err)
	}
	out := make([]string, len(events))
	for i, e := range events {
		out[i] = string(e)
	}
	return out, nil
}
