package eventqueue

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"
	"unsafe"

	"github.com/redis/go-redis/v9"
)

// Reading the events a lease call leased for the first time. The lease script hands out
// their offsets only: through Lua, each event's bytes would be copied into a Lua string and
// again into the script's reply, and go-redis would then decode every one into a string of
// its own. Read after the script with readconn.go's parser, they are copied once, into one
// buffer. Until they are read, the queue may have changed: a trim may have moved its front,
// or a rebuild replaced it. The read checks both in the same transaction.

// rangeRead is one atomic read of the front offset, the lease epoch and a run of events.
type rangeRead struct {
	front  int64
	epoch  string
	events []string // views into one buffer
}

// freshEvents returns the events at offsets first … first+n-1 of tenantID's queue, read after
// a lease call under epoch that found the queue's front at front. Those the front has passed
// meanwhile are left out (from is the offset of the first returned); when the queue was
// rebuilt (another epoch), none is: their leases went with it.
//
// A trim between the script and the read shifts the list under the indices. The read tells:
// it gets the front in the same transaction. What it got of the wanted offsets is kept, and
// the rest (a run just below them, moved down by the trim) is read again; each read either
// completes the run or finds the front further on, so this ends.
func (s *Store) freshEvents(ctx context.Context, tenantID uint64, epoch string, front, first int64, n int) (from int64, events []string, err error) {
	events = make([]string, n) // by offset - first
	end := first + int64(n)
	lo, hi := max(first, front), end // [lo, hi) is still to read; [hi, end) is read
	for lo < hi {
		r, err := s.readRange(ctx, tenantID, int(lo-front), int(hi-1-front))
		if err != nil {
			return 0, nil, fmt.Errorf("eventqueue: lease: %w", err)
		}
		if r.epoch != epoch {
			return end, nil, nil
		}
		at := r.front + lo - front // the offset of the first event read
		for i, ev := range r.events {
			if o := at + int64(i); o >= lo && o < hi {
				events[o-first] = ev
			}
		}
		hi = min(hi, at) // the events up to the tail exist: [at, hi) is read whole
		lo, front = max(lo, r.front), r.front
	}
	from = min(lo, end)
	return from, events[from-first:], nil
}

// readRange reads the queue's front offset, its lease epoch and LRANGE start stop, in one
// transaction: through the read path's own connections, or go-redis where they cannot serve.
func (s *Store) readRange(ctx context.Context, tenantID uint64, start, stop int) (rangeRead, error) {
	key, offsetKey, epochKey := Key(tenantID), OffsetKey(tenantID), LeaseEpochKey(tenantID)
	if s.fast != nil {
		r, err := s.fast.readRange(ctx, key, offsetKey, epochKey, start, stop)
		if !errors.Is(err, errUseClient) {
			return r, err
		}
	}
	var offset, epoch *redis.StringCmd
	var events *redis.StringSliceCmd
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		offset = p.Get(ctx, offsetKey)
		epoch = p.Get(ctx, epochKey)
		events = p.LRange(ctx, key, int64(start), int64(stop))
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return rangeRead{}, err
	}
	r := rangeRead{epoch: epoch.Val(), events: events.Val()}
	if r.front, err = offset.Int64(); err != nil && !errors.Is(err, redis.Nil) {
		return rangeRead{}, err
	}
	return r, nil
}

// readRange is Store.readRange over a pooled plain connection of key's node. A pooled
// connection that fails before any reply (Redis restarted since it was last used) is replaced
// once.
func (l *lrangeReader) readRange(ctx context.Context, key, offsetKey, epochKey string, start, stop int) (rangeRead, error) {
	p, err := l.node(ctx, key)
	if err != nil {
		return rangeRead{}, err
	}
	for attempt := 0; ; attempt++ {
		c, reused, err := p.get(ctx)
		if err != nil {
			return rangeRead{}, err
		}
		r, clean, err := c.readRange(ctx, p.opt.ReadTimeout, key, offsetKey, epochKey, start, stop)
		if clean {
			p.put(c)
		} else {
			p.discard(c)
		}
		var rerr redisError
		switch {
		case err == nil:
			return r, nil
		case errors.As(err, &rerr):
			if rerr.redirect() {
				return rangeRead{}, errUseClient
			}
			return rangeRead{}, err
		case !reused || attempt > 0 || ctx.Err() != nil:
			return rangeRead{}, err
		}
	}
}

// readRange sends MULTI, GET offsetKey, GET epochKey, LRANGE key start stop, EXEC in one write
// and reads the whole reply, the events copied into one buffer. clean reports that the reply
// was read whole, so that the connection can be used again.
func (c *respConn) readRange(ctx context.Context, timeout time.Duration, key, offsetKey, epochKey string, start, stop int) (r rangeRead, clean bool, err error) {
	unwatch := c.watch(ctx, timeout)
	defer func() {
		putChunk(c.buf)
		c.buf, c.r, c.w = nil, 0, 0
		if !unwatch() && err == nil {
			err, clean = ctx.Err(), false
		}
	}()
	c.cmd = appendCommand(c.cmd[:0], "MULTI")
	c.cmd = appendCommand(c.cmd, "GET", offsetKey)
	c.cmd = appendCommand(c.cmd, "GET", epochKey)
	c.cmd = appendCommand(c.cmd, "LRANGE", key, strconv.Itoa(start), strconv.Itoa(stop))
	c.cmd = appendCommand(c.cmd, "EXEC")
	if _, err := c.conn.Write(c.cmd); err != nil {
		return r, false, err
	}
	var refused error
	for i := range 4 {
		line, err := c.line()
		if err != nil {
			return r, false, err
		}
		switch {
		case len(line) > 0 && line[0] == '-':
			if refused == nil {
				refused = redisError(line[1:])
			}
		case string(line) != [...]string{"+OK", "+QUEUED", "+QUEUED", "+QUEUED"}[i]:
			return r, false, fmt.Errorf("redis: unexpected reply %q", line)
		}
	}
	line, err := c.line()
	if err != nil {
		return r, false, err
	}
	if line[0] == '-' {
		if refused != nil {
			return r, true, refused
		}
		return r, true, redisError(line[1:])
	}
	if string(line) != "*3" {
		return r, false, fmt.Errorf("redis: unexpected reply %q", line)
	}
	if r.front, err = c.integer(); err != nil {
		return r, false, err
	}
	epoch, err := c.bulk(nil)
	if err != nil {
		return r, false, err
	}
	r.epoch = string(epoch)
	if line, err = c.line(); err != nil {
		return r, false, err
	}
	if len(line) > 0 && line[0] == '-' {
		return r, true, redisError(line[1:])
	}
	n, ok := parseLen(line, '*')
	if !ok {
		return r, false, fmt.Errorf("redis: unexpected reply %q", line)
	}
	var buf []byte
	ends := make([]int, n)
	for i := range n {
		if buf, err = c.bulk(buf); err != nil {
			return r, false, err
		}
		if i == 0 {
			buf = append(make([]byte, 0, len(buf)*n+len(buf)*n/4), buf...) // events are alike in size
		}
		ends[i] = len(buf)
	}
	r.events = make([]string, n)
	from := 0
	for i, end := range ends {
		r.events[i] = unsafe.String(unsafe.SliceData(buf[from:]), end-from) // buf is never written again
		from = end
	}
	return r, true, nil
}

// bulk reads a bulk string and appends it to dst; a nil bulk string appends nothing.
func (c *respConn) bulk(dst []byte) ([]byte, error) {
	line, err := c.line()
	if err != nil {
		return dst, err
	}
	if string(line) == "$-1" {
		return dst, nil
	}
	size, ok := parseLen(line, '$')
	if !ok {
		return dst, fmt.Errorf("redis: unexpected element %q", line)
	}
	for left := size + 2; left > 0; { // the bytes, then CRLF
		if c.r == c.w {
			if err := c.fill(); err != nil {
				return dst, err
			}
		}
		k := min(left, c.w-c.r)
		if keep := min(k, left-2); keep > 0 {
			dst = append(dst, c.buf[c.r:c.r+keep]...)
		}
		c.r, left = c.r+k, left-k
	}
	return dst, nil
}
