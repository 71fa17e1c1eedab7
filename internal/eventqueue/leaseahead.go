package eventqueue

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// Reading ahead: one consumer's lease calls follow each other, so the api sends the lease
// script and the read of the events it will hand out for the first time in one write, where
// leaseread.go reads them after the script, a second round trip. The read is checked as any
// other (freshEvents), so a wrong guess costs a read, never an event.

// readAhead is what Lease read in the lease script's round trip: LRANGE from index start on,
// with the front and epoch of that moment.
type readAhead struct {
	read  rangeRead
	start int64
}

// leaseHint is where a tenant's next lease call should find new events: where the last one
// ended, with the front it saw (or a later ack trimmed to). follows reports that the last
// call began where the call before it ended, as one consumer's calls do; then the next call
// reads ahead. Each api process keeps its own hints; a wrong one costs a read, never an event.
type leaseHint struct {
	front, next int64
	follows     bool
}

// leaseReadingAhead runs the lease script and, when tenantID's hint says so, reads the limit
// events at the hinted offset in the same round trip. A nil reply means it did not run the
// script: the caller runs it through go-redis.
func (s *Store) leaseReadingAhead(ctx context.Context, tenantID uint64, keys []string, args []any, limit int) ([]any, *readAhead, error) {
	v, ok := s.hints.Load(tenantID)
	if !ok || s.fast == nil {
		return nil, nil, nil
	}
	h := v.(leaseHint)
	if !h.follows || h.next < h.front {
		return nil, nil, nil
	}
	start := h.next - h.front
	res, r, err := s.fast.leaseAhead(ctx, leaseScript, keys, args, int(start), int(start)+limit-1)
	switch {
	case err == nil:
		return res, &readAhead{read: r, start: start}, nil
	case errors.Is(err, errNotRun):
		return nil, nil, nil // NOSCRIPT, a redirect, a stale connection: through go-redis
	}
	return nil, nil, err // the script may have run: the caller must not run it again
}

// errNotRun means leaseAhead knows the script did not run: Redis refused it (NOSCRIPT, a
// redirect), or closed the connection before any reply (a pooled connection to a Redis that
// restarted since).
var errNotRun = errors.New("eventqueue: the lease script did not run")

func notRun(err error, replied bool) error {
	var rerr redisError
	switch {
	case errors.As(err, &rerr) && (rerr.redirect() || strings.HasPrefix(string(rerr), "NOSCRIPT")),
		errors.Is(err, errUseClient),
		!replied && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)):
		return fmt.Errorf("%w: %w", errNotRun, err)
	}
	return err
}

// noteLease records a lease call that found the front at front and leased [first, end) for
// the first time.
func (s *Store) noteLease(tenantID uint64, front, first, end int64) {
	follows := false
	if v, ok := s.hints.Load(tenantID); ok {
		follows = v.(leaseHint).next == first
	}
	s.hints.Store(tenantID, leaseHint{front: front, next: end, follows: follows})
}

// noteFront records that an ack trimmed tenantID's queue to front.
func (s *Store) noteFront(tenantID uint64, front int64) {
	if v, ok := s.hints.Load(tenantID); ok {
		h := v.(leaseHint)
		h.front = max(h.front, front)
		s.hints.Store(tenantID, h)
	}
}

// leaseAhead runs script with keys and args, and reads the front, the epoch and LRANGE key
// start stop after it, in one round trip over a pooled plain connection (see Store.Lease).
// The script's reply comes as go-redis's Slice would give it. When Redis does not know the
// script (NOSCRIPT), or the connection cannot serve, it returns an error and the caller runs
// the script through go-redis.
func (l *lrangeReader) leaseAhead(ctx context.Context, script *redis.Script, keys []string, args []any, start, stop int) ([]any, rangeRead, error) {
	key, offsetKey, epochKey := keys[0], keys[1], keys[7]
	p, err := l.node(ctx, key)
	if err != nil {
		return nil, rangeRead{}, notRun(err, false)
	}
	c, _, err := p.get(ctx)
	if err != nil {
		return nil, rangeRead{}, notRun(err, false)
	}
	res, r, clean, replied, err := c.leaseAhead(ctx, p.opt.ReadTimeout, script.Hash(), keys, args, key, offsetKey, epochKey, start, stop)
	if clean {
		p.put(c)
	} else {
		p.discard(c)
	}
	if err != nil {
		return nil, rangeRead{}, notRun(err, replied)
	}
	return res, r, nil
}

func (c *respConn) leaseAhead(ctx context.Context, timeout time.Duration, sha string, keys []string, args []any, key, offsetKey, epochKey string, start, stop int) (res []any, r rangeRead, clean, replied bool, err error) {
	defer c.exchange(ctx, timeout)(&err, &clean)
	cmd := make([]string, 0, 3+len(keys)+len(args))
	cmd = append(cmd, "EVALSHA", sha, strconv.Itoa(len(keys)))
	cmd = append(cmd, keys...)
	for _, a := range args {
		cmd = append(cmd, fmt.Sprint(a))
	}
	c.cmd = appendCommand(c.cmd[:0], cmd...)
	c.cmd = appendRangeRead(c.cmd, key, offsetKey, epochKey, start, stop)
	if _, err := c.conn.Write(c.cmd); err != nil {
		return nil, r, false, false, err
	}
	v, scriptErr := c.value()
	replied = c.w > 0
	var rerr redisError
	if scriptErr != nil && !errors.As(scriptErr, &rerr) {
		return nil, r, false, replied, scriptErr
	}
	r, clean, err = c.rangeReply() // read whatever the script answered, so the connection stays usable
	if scriptErr != nil {
		return nil, r, clean, true, scriptErr
	}
	if err != nil {
		return nil, r, clean, true, err
	}
	res, ok := v.([]any)
	if !ok {
		return nil, r, clean, true, fmt.Errorf("redis: the lease script answered %T", v)
	}
	return res, r, clean, true, nil
}
