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
// a lease call under epoch that found the queue's front at front, starting from what ahead
// read (nil: nothing). Those the front has passed meanwhile are left out (from is the offset
// of the first returned); when the queue was rebuilt (another epoch), none is: their leases
// went with it.
//
// A trim between the script and a read shifts the list under the indices. The read tells: it
// gets the front in the same transaction. What it got of the wanted offsets is kept and the
// rest is read again, from the front it found.
func (s *Store) freshEvents(ctx context.Context, tenantID uint64, epoch string, front, first int64, n int, ahead *readAhead) (from int64, events []string, err error) {
	events = make([]string, n) // by offset - first
	have := make([]bool, n)
	end := first + int64(n)
	lo := max(first, front)                    // below lo, the events are gone
	take := func(r rangeRead, at int64) bool { // at: the offset of r's first event
		if r.epoch != epoch {
			return false
		}
		for i, ev := range r.events {
			if o := at + int64(i); o >= lo && o < end {
				events[o-first], have[o-first] = ev, true
			}
		}
		lo = max(lo, r.front)
		return true
	}
	if ahead != nil {
		if !take(ahead.read, ahead.read.front+ahead.start) {
			return end, nil, nil
		}
		front = ahead.read.front
	}
	for attempt := 0; ; attempt++ {
		a, b := lo, lo // the events still to read: [a, b)
		for o := lo; o < end; o++ {
			if !have[o-first] {
				if a == b {
					a = o
				}
				b = o + 1
			}
		}
		if a == b {
			from = min(lo, end)
			return from, events[from-first:], nil
		}
		if attempt == 100 {
			return 0, nil, errors.New("eventqueue: lease: the queue's front keeps moving")
		}
		r, err := s.readRange(ctx, tenantID, int(a-front), int(b-1-front))
		if err != nil {
			return 0, nil, fmt.Errorf("eventqueue: lease: %w", err)
		}
		if !take(r, r.front+a-front) {
			return end, nil, nil
		}
		front = r.front
	}
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

// exchange sets the connection up for one command's round trip (its deadline from timeout
// and ctx); the func it returns, deferred, gives the chunk back and makes a cancelled ctx the
// error, the connection then unfit for reuse.
func (c *respConn) exchange(ctx context.Context, timeout time.Duration) func(err *error, clean *bool) {
	unwatch := c.watch(ctx, timeout)
	return func(err *error, clean *bool) {
		putChunk(c.buf)
		c.buf, c.r, c.w = nil, 0, 0
		if !unwatch() && *err == nil {
			*err, *clean = ctx.Err(), false
		}
	}
}

// readRange sends MULTI, GET offsetKey, GET epochKey, LRANGE key start stop, EXEC in one write
// and reads the whole reply, the events copied into one buffer. clean reports that the reply
// was read whole, so that the connection can be used again.
func (c *respConn) readRange(ctx context.Context, timeout time.Duration, key, offsetKey, epochKey string, start, stop int) (r rangeRead, clean bool, err error) {
	defer c.exchange(ctx, timeout)(&err, &clean)
	c.cmd = appendRangeRead(c.cmd[:0], key, offsetKey, epochKey, start, stop)
	if _, err := c.conn.Write(c.cmd); err != nil {
		return r, false, err
	}
	return c.rangeReply()
}

func appendRangeRead(b []byte, key, offsetKey, epochKey string, start, stop int) []byte {
	b = appendCommand(b, "MULTI")
	b = appendCommand(b, "GET", offsetKey)
	b = appendCommand(b, "GET", epochKey)
	b = appendCommand(b, "LRANGE", key, strconv.Itoa(start), strconv.Itoa(stop))
	return appendCommand(b, "EXEC")
}

// rangeReply reads the replies to appendRangeRead's commands.
func (c *respConn) rangeReply() (r rangeRead, clean bool, err error) {
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
