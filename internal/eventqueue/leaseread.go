package eventqueue

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"syscall"
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
	return c.bulkBody(dst, size)
}

// bulkBody appends the next size bytes to dst and skips the CRLF after them.
func (c *respConn) bulkBody(dst []byte, size int) ([]byte, error) {
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

// value reads one reply as go-redis's Slice would give it: int64, string, nil or []any. An
// error reply inside an array is returned as the error once the whole reply is read.
func (c *respConn) value() (any, error) {
	line, err := c.line()
	if err != nil {
		return nil, err
	}
	if len(line) == 0 {
		return nil, errors.New("redis: empty reply")
	}
	switch line[0] {
	case ':':
		return strconv.ParseInt(string(line[1:]), 10, 64)
	case '+':
		return string(line[1:]), nil
	case '-':
		return nil, redisError(line[1:])
	case '$':
		if string(line) == "$-1" {
			return nil, nil
		}
		size, ok := parseLen(line, '$')
		if !ok {
			return nil, fmt.Errorf("redis: unexpected reply %q", line)
		}
		b, err := c.bulkBody(make([]byte, 0, size), size)
		return string(b), err
	case '*':
		if string(line) == "*-1" {
			return nil, nil
		}
		n, ok := parseLen(line, '*')
		if !ok {
			return nil, fmt.Errorf("redis: unexpected reply %q", line)
		}
		out := make([]any, n)
		var first error
		for i := range out {
			v, err := c.value()
			var rerr redisError
			switch {
			case errors.As(err, &rerr):
				first = cmp.Or(first, err)
			case err != nil:
				return nil, err
			}
			out[i] = v
		}
		return out, first
	}
	return nil, fmt.Errorf("redis: unexpected reply %q", line)
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
	unwatch := c.watch(ctx, timeout)
	defer func() {
		putChunk(c.buf)
		c.buf, c.r, c.w = nil, 0, 0
		if !unwatch() && err == nil {
			err, clean = ctx.Err(), false
		}
	}()
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
