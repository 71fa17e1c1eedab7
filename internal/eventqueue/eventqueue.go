// Package eventqueue is the per-tenant event queue in Redis: append at the back, read the
// front without removing, trim a counted prefix.
package eventqueue

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/redis/go-redis/v9"
)

// MaxRead is the most events one Read returns.
const MaxRead = 10000

// Store keeps one Redis list per tenant. Each element is an event's final JSON bytes.
type Store struct {
	rdb  redis.UniversalClient
	fast *lrangeReader // nil: every read goes through go-redis
	// MaxLength is the most events AppendOnce lets one queue hold (EVENTQUEUE_MAX_LENGTH);
	// 0 means no limit. Set it before use.
	MaxLength int64
}

func (s *Store) maxLength() int64 {
	if s.MaxLength <= 0 {
		return math.MaxInt64 >> 11 // exactly representable in Lua's doubles
	}
	return s.MaxLength
}

// New returns a Store on rdb (the connection named by EVENTQUEUE_QUEUE_CONNECTION). Close
// releases the read path's own connections; rdb stays the caller's to close.
func New(rdb redis.UniversalClient) *Store { return &Store{rdb: rdb, fast: newLRangeReader(rdb)} }

// Close closes the idle connections of the read path.
func (s *Store) Close() {
	if s.fast != nil {
		s.fast.close()
	}
}

// Key is the list of tenantID. The braces are a Redis Cluster hash tag: everything of one
// tenant lives in one slot.
func Key(tenantID uint64) string { return fmt.Sprintf("eventqueue:{tenant:%d}:events", tenantID) }

// Append pushes events to the back of the tenant's queue in the given order, atomically
// (one RPUSH), without deduplication: tests and benchmarks fill queues with it. Ingestion
// appends with AppendOnce.
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

// ReadPage returns up to MaxRead events from the front of the queue, oldest first, without
// removing them: one LRANGE whose reply is parsed as it arrives, the events never decoded nor
// copied (see Page). The caller releases the page.
func (s *Store) ReadPage(ctx context.Context, tenantID uint64) (*Page, error) {
	if s.fast != nil {
		page, err := s.fast.lrange(ctx, Key(tenantID), MaxRead-1)
		if !errors.Is(err, errUseClient) {
			if err != nil {
				return nil, fmt.Errorf("eventqueue: read: %w", err)
			}
			return page, nil
		}
	}
	// A client the fast path does not mirror, or a cluster redirect: go-redis's raw reply,
	// copied once.
	var out bytes.Buffer
	page := &Page{}
	w := &respArrayWriter{out: &out, header: func(n int) { page.Count = n }}
	if err := s.rdb.Process(ctx, redis.NewRawWriteToCmd(ctx, w, "lrange", Key(tenantID), 0, MaxRead-1)); err != nil {
		return nil, fmt.Errorf("eventqueue: read: %w", err)
	}
	if err := w.finish(); err != nil {
		return nil, fmt.Errorf("eventqueue: read: %w", err)
	}
	page.add(out.Bytes())
	return page, nil
}

// Trim removes the first count events (one LTRIM, atomic); events behind them stay, whenever
// they arrived. Trimming more than the queue holds empties it.
func (s *Store) Trim(ctx context.Context, tenantID uint64, count int64) error {
	if err := s.rdb.LTrim(ctx, Key(tenantID), count, -1).Err(); err != nil {
		return fmt.Errorf("eventqueue: trim: %w", err)
	}
	return nil
}

// Len returns the queue's length.
func (s *Store) Len(ctx context.Context, tenantID uint64) (int64, error) {
	n, err := s.rdb.LLen(ctx, Key(tenantID)).Result()
	if err != nil {
		return 0, fmt.Errorf("eventqueue: len: %w", err)
	}
	return n, nil
}
