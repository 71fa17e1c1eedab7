package eventqueue

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// errUseClient means the fast reader cannot serve this read (a cluster redirect, a client it
// cannot dial by itself); nothing was written and the caller reads through go-redis instead.
var errUseClient = errors.New("eventqueue: read through go-redis")

// lrangeReader serves the read path (MULTI, GET offset, LRANGE, EXEC) over its own plain
// connections to the same Redis nodes as the client. This file is eventq's one RESP parser,
// and the one place go-redis is bypassed: go-redis decodes each element of a reply into a
// string (10,000 allocations for a full read) and measured about 1.8× a bare LRANGE before any
// HTTP, where this parser reads the reply as it arrives into pooled chunks and hands the events
// out as slices of them (BenchmarkReadPage against BenchmarkRawLRANGE; FuzzRESPReply keeps it
// honest on any bytes).
type lrangeReader struct {
	rdb   redis.UniversalClient
	mu    sync.Mutex
	pools map[string]*nodePool // by node address
}

// newLRangeReader returns nil when rdb is not a kind of client it knows how to mirror.
func newLRangeReader(rdb redis.UniversalClient) *lrangeReader {
	switch rdb.(type) {
	case *redis.Client, *redis.ClusterClient:
		return &lrangeReader{rdb: rdb, pools: map[string]*nodePool{}}
	}
	return nil
}

// node returns the pool of the node that holds key: the client's own address, or on a
// cluster the master of the key's slot.
func (l *lrangeReader) node(ctx context.Context, key string) (*nodePool, error) {
	var opt *redis.Options
	switch c := l.rdb.(type) {
	case *redis.Client:
		opt = c.Options()
	case *redis.ClusterClient:
		master, err := c.MasterForKey(ctx, key)
		if err != nil {
			return nil, errUseClient
		}
		opt = master.Options()
	}
	if opt.Dialer == nil || opt.CredentialsProvider != nil || opt.CredentialsProviderContext != nil ||
		opt.StreamingCredentialsProvider != nil || opt.OnConnect != nil {
		return nil, errUseClient
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	p, ok := l.pools[opt.Addr]
	if !ok {
		size := max(opt.PoolSize, 1)
		p = &nodePool{opt: opt, slots: make(chan struct{}, size), idle: make(chan *respConn, size),
			streams: make(chan struct{}, max(size/2, 1))}
		l.pools[opt.Addr] = p
	}
	return p, nil
}

// open reads the front offset and LRANGE key 0 stop, atomically, into a page whose events may
// still be arriving (see Page.Fill and Page.Stream). A pooled connection that fails before the
// reply's first bytes (Redis restarted since it was last used) is replaced once.
func (l *lrangeReader) open(ctx context.Context, key, offsetKey string, stop int) (*Page, error) {
	p, err := l.node(ctx, key)
	if err != nil {
		return nil, err
	}
	for attempt := 0; ; attempt++ {
		c, reused, err := p.get(ctx)
		if err != nil {
			return nil, err
		}
		page, err := c.open(ctx, p, p.opt.ReadTimeout, key, offsetKey, stop)
		var rerr redisError
		switch {
		case err == nil:
			return page, nil // the page gives the connection back once its events are read
		case errors.As(err, &rerr):
			if rerr.redirect() {
				return nil, errUseClient
			}
			return nil, err
		case !reused || attempt > 0 || ctx.Err() != nil:
			return nil, err
		}
		// A stale pooled connection (Redis restarted since): open closed it; try a fresh one.
	}
}

// close closes every idle connection.
func (l *lrangeReader) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, p := range l.pools {
		p.close()
	}
}

// nodePool holds at most opt.PoolSize connections to one node.
type nodePool struct {
	opt   *redis.Options
	slots chan struct{}  // one per open connection
	idle  chan *respConn // open and unused
	// streams holds a token per connection lent to a streaming page (Page.Stream): at most
	// half of them, so that slow clients cannot keep every read waiting.
	streams chan struct{}
}

// get returns an idle connection, or dials one when fewer than PoolSize are open, or waits.
func (p *nodePool) get(ctx context.Context) (*respConn, bool, error) {
	select {
	case c := <-p.idle:
		return c, true, nil
	default:
	}
	select {
	case c := <-p.idle:
		return c, true, nil
	case p.slots <- struct{}{}:
		c, err := dial(ctx, p.opt)
		if err != nil {
			<-p.slots
			return nil, false, err
		}
		return c, false, nil
	case <-ctx.Done():
		return nil, false, ctx.Err()
	}
}

func (p *nodePool) put(c *respConn) { p.idle <- c } // never blocks: idle holds every open one

func (p *nodePool) discard(c *respConn) {
	c.conn.Close()
	<-p.slots
}

func (p *nodePool) close() {
	for {
		select {
		case c := <-p.idle:
			p.discard(c)
		default:
			return
		}
	}
}

// respConn is one plain connection and the chunk it is reading into.
type respConn struct {
	conn net.Conn
	buf  []byte // a chunk
	r, w int    // unread bytes are buf[r:w]
	page *Page  // the page being read: it takes every chunk its events point into
	cmd  []byte
}

// dial connects with the client's own dialer (TLS included) and authenticates and selects the
// database as go-redis would.
func dial(ctx context.Context, opt *redis.Options) (*respConn, error) {
	conn, err := opt.Dialer(ctx, opt.Network, opt.Addr)
	if err != nil {
		return nil, err
	}
	c := &respConn{conn: conn}
	var hello [][]string
	if opt.Password != "" {
		if opt.Username != "" {
			hello = append(hello, []string{"AUTH", opt.Username, opt.Password})
		} else {
			hello = append(hello, []string{"AUTH", opt.Password})
		}
	}
	if opt.DB != 0 {
		hello = append(hello, []string{"SELECT", strconv.Itoa(opt.DB)})
	}
	if len(hello) > 0 {
		if err := c.handshake(ctx, opt.DialTimeout, hello); err != nil {
			conn.Close()
			return nil, err
		}
	}
	return c, nil
}

// handshake sends cmds in one write and expects +OK to each.
func (c *respConn) handshake(ctx context.Context, timeout time.Duration, cmds [][]string) (err error) {
	unwatch := c.watch(ctx, timeout)
	defer func() {
		if !unwatch() && err == nil {
			err = ctx.Err()
		}
	}()
	c.cmd = c.cmd[:0]
	for _, args := range cmds {
		c.cmd = appendCommand(c.cmd, args...)
	}
	if _, err := c.conn.Write(c.cmd); err != nil {
		return err
	}
	for range cmds {
		line, err := c.line()
		if err != nil {
			return err
		}
		if len(line) > 0 && line[0] == '-' {
			return redisError(line[1:])
		}
		if string(line) != "+OK" {
			return fmt.Errorf("redis: unexpected reply %q", line)
		}
	}
	return nil
}

// watch sets the connection's deadline from timeout and ctx, and makes ctx's cancellation
// interrupt a blocked read or write. The returned func undoes both; it reports false when ctx
// was cancelled meanwhile, as the connection's deadline may then be in the past.
func (c *respConn) watch(ctx context.Context, timeout time.Duration) func() bool {
	var deadline time.Time
	if timeout > 0 {
		deadline = time.Now().Add(timeout)
	}
	if d, ok := ctx.Deadline(); ok && (deadline.IsZero() || d.Before(deadline)) {
		deadline = d
	}
	c.conn.SetDeadline(deadline)
	return context.AfterFunc(ctx, func() { c.conn.SetDeadline(time.Unix(1, 0)) })
}

// open sends MULTI, GET offsetKey, LRANGE key 0 stop, EXEC in one write and reads the reply
// up to the LRANGE's element count: the page then has its Count and Offset, both from one
// atomic step, while its events may still be arriving. When there are none, or on an error,
// the connection goes back to pool (or is closed if its state is unknown) before open returns;
// otherwise the page keeps the connection, reads the events from it and gives it back at the
// end (see Page). Both keys are in one slot, so this works on a cluster. Measured beside the
// bare LRANGE, the transaction costs 1.01–1.05×.
func (c *respConn) open(ctx context.Context, pool *nodePool, timeout time.Duration, key, offsetKey string, stop int) (result *Page, err error) {
	unwatch := c.watch(ctx, timeout)
	page := &Page{}
	c.page = page
	clean := false // the whole reply was read: the connection can be reused
	defer func() {
		if err == nil && page.rest != nil {
			return // the page owns the connection now
		}
		c.page = nil
		page.take(c.buf)
		c.buf, c.r, c.w = nil, 0, 0
		if !unwatch() && err == nil {
			err = ctx.Err()
		}
		if pool != nil {
			if clean && (err == nil || isRedisError(err)) {
				pool.put(c)
			} else {
				pool.discard(c)
			}
		}
		if err != nil {
			page.Release()
			result = nil
		}
	}()
	c.cmd = appendCommand(c.cmd[:0], "MULTI")
	c.cmd = appendCommand(c.cmd, "GET", offsetKey)
	c.cmd = appendCommand(c.cmd, "LRANGE", key, "0", strconv.Itoa(stop))
	c.cmd = appendCommand(c.cmd, "EXEC")
	if _, err := c.conn.Write(c.cmd); err != nil {
		return nil, err
	}
	// +OK, then +QUEUED or an error (a redirect on a cluster) for each command, then EXEC's
	// reply: -EXECABORT when a command was refused (the first refusal is returned), or an
	// array of the two replies.
	var refused error
	for i := range 3 {
		line, err := c.line()
		if err != nil {
			return nil, err
		}
		switch {
		case len(line) > 0 && line[0] == '-':
			if refused == nil {
				refused = redisError(line[1:])
			}
		case string(line) != [...]string{"+OK", "+QUEUED", "+QUEUED"}[i]:
			return nil, fmt.Errorf("redis: unexpected reply %q", line)
		}
	}
	line, err := c.line()
	if err != nil {
		return nil, err
	}
	if line[0] == '-' {
		clean = true
		if refused != nil {
			return nil, refused
		}
		return nil, redisError(line[1:])
	}
	if string(line) != "*2" {
		return nil, fmt.Errorf("redis: unexpected reply %q", line)
	}
	offset, err := c.integer()
	if err != nil {
		return nil, err // the events' reply is still to come: the connection is closed
	}
	if line, err = c.line(); err != nil {
		return nil, err
	}
	if len(line) > 0 && line[0] == '-' {
		clean = true
		return nil, redisError(line[1:])
	}
	n, ok := parseLen(line, '*')
	if !ok {
		return nil, fmt.Errorf("redis: unexpected reply %q", line)
	}
	page.Count, page.Offset = n, offset
	page.Events = make(net.Buffers, 0, n+n/16)
	if n == 0 {
		clean = true
		return page, nil
	}
	page.rest = &pageRest{ctx: ctx, c: c, pool: pool, timeout: timeout, n: n, unwatch: unwatch}
	return page, nil
}

func isRedisError(err error) bool {
	var rerr redisError
	return errors.As(err, &rerr)
}

// elements reads the next n bulk strings of an array into the page.
func (c *respConn) elements(n int) error {
	for i := range n {
		line, err := c.line()
		if err != nil {
			return err
		}
		size, ok := parseLen(line, '$')
		if !ok {
			return fmt.Errorf("redis: unexpected element %q", line)
		}
		if err := c.element(size, i > 0); err != nil {
			return err
		}
	}
	return nil
}

// integer reads a bulk string holding a decimal integer, or a nil bulk string (0).
func (c *respConn) integer() (int64, error) {
	line, err := c.line()
	if err != nil {
		return 0, err
	}
	if string(line) == "$-1" {
		return 0, nil
	}
	if line[0] == '-' {
		return 0, redisError(line[1:])
	}
	size, ok := parseLen(line, '$')
	if !ok || size > 20 {
		return 0, fmt.Errorf("redis: unexpected reply %q", line)
	}
	if line, err = c.line(); err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(string(line), 10, 64)
	if err != nil || len(line) != size {
		return 0, fmt.Errorf("redis: not an integer: %q", line)
	}
	return n, nil
}

// element adds the next size bytes to the page, preceded by a comma if comma is set, and
// skips the CRLF after them. An element is one slice of a chunk, comma included, unless it
// straddles two chunks.
func (c *respConn) element(size int, comma bool) error {
	p := c.page
	for left := size; left > 0 || comma; {
		if c.r == c.w {
			if err := c.fill(); err != nil {
				return err
			}
		}
		from, to := c.r, c.r+min(left, c.w-c.r)
		if comma {
			if from > 0 { // the byte before is the header's '\n', already consumed
				from--
				c.buf[from] = ','
			} else {
				p.add(commaBytes)
			}
			comma = false
		}
		p.add(c.buf[from:to])
		left -= to - c.r
		c.r = to
	}
	for skip := 2; skip > 0; {
		if c.r == c.w {
			if err := c.fill(); err != nil {
				return err
			}
		}
		k := min(skip, c.w-c.r)
		c.r, skip = c.r+k, skip-k
	}
	return nil
}

var commaBytes = []byte{','}

// line returns the next CRLF-terminated line, without the CRLF.
func (c *respConn) line() ([]byte, error) {
	for {
		if i := bytes.IndexByte(c.buf[c.r:c.w], '\n'); i >= 0 {
			line := c.buf[c.r : c.r+i+1]
			c.r += i + 1
			if len(line) < 3 || line[len(line)-2] != '\r' {
				return nil, fmt.Errorf("redis: bad line %q", line)
			}
			return line[:len(line)-2], nil
		}
		if c.w-c.r == chunkSize {
			return nil, errors.New("redis: line too long")
		}
		if err := c.fill(); err != nil {
			return nil, err
		}
	}
}

// fill reads more bytes. When the chunk is full it moves on to a new one, carrying the unread
// bytes over; the full chunk goes to the page, whose events may point into it, or back to the
// pool when the page is streaming and has written every event read so far.
func (c *respConn) fill() error {
	if c.page != nil && c.page.rest != nil {
		if err := c.page.rest.flush(c.page); err != nil { // what is parsed goes out while more arrives
			return err
		}
	}
	if c.buf == nil || c.w == len(c.buf) {
		next := getChunk()
		c.w = copy(next, c.buf[c.r:c.w])
		c.r = 0
		if c.page != nil && !c.page.written() {
			c.page.take(c.buf)
		} else {
			putChunk(c.buf)
		}
		c.buf = next
	}
	n, err := c.conn.Read(c.buf[c.w:])
	c.w += n
	if n > 0 {
		return nil
	}
	if err == nil {
		err = io.ErrNoProgress
	}
	return err
}

// redisError is an error reply; the connection stays usable after one.
type redisError string

func (e redisError) Error() string { return "redis: " + string(e) }

// redirect reports whether the reply sends the client to another node.
func (e redisError) redirect() bool {
	for _, prefix := range []string{"MOVED ", "ASK ", "TRYAGAIN", "CLUSTERDOWN"} {
		if strings.HasPrefix(string(e), prefix) {
			return true
		}
	}
	return false
}

// parseLen parses a "*N" or "$N" header with N ≥ 0.
func parseLen(line []byte, kind byte) (int, bool) {
	if len(line) < 2 || line[0] != kind || len(line) > 11 {
		return 0, false
	}
	n := 0
	for _, b := range line[1:] {
		if b < '0' || b > '9' {
			return 0, false
		}
		n = n*10 + int(b-'0')
	}
	return n, true
}

// appendCommand appends args as a RESP array of bulk strings.
func appendCommand(b []byte, args ...string) []byte {
	b = append(b, '*')
	b = strconv.AppendInt(b, int64(len(args)), 10)
	b = append(b, '\r', '\n')
	for _, a := range args {
		b = append(b, '$')
		b = strconv.AppendInt(b, int64(len(a)), 10)
		b = append(b, '\r', '\n')
		b = append(b, a...)
		b = append(b, '\r', '\n')
	}
	return b
}
