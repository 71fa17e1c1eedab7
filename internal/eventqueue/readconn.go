package eventqueue

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// errUseClient means the fast reader cannot serve this read (a cluster redirect, a client it
// cannot dial by itself); nothing was written and the caller reads through go-redis instead.
var errUseClient = errors.New("eventqueue: read through go-redis")

// lrangeReader serves the read path (see respConn.open) and the reads of leased
// events (leaseread.go, leaseahead.go) over its own plain connections to the same Redis nodes
// as the client. With resp.go it is eventq's one RESP parser, and the one place go-redis is
// bypassed: go-redis decodes each element of a reply into a
// string (an allocation per event of a full read) and cost far more than a bare LRANGE before
// any HTTP, where this parser reads the reply as it arrives into pooled chunks and hands the events
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

// open reads the front offset and the front of the list (see respConn.open), atomically, into
// a page whose events may still be arriving (see Page.Fill and Page.Stream). A pooled
// connection that fails before the reply's first bytes (Redis restarted since it was last
// used) is replaced once.
func (l *lrangeReader) open(ctx context.Context, key, offsetKey, sizeKey string, limit int, maxBytes int64) (*Page, error) {
	p, err := l.node(ctx, key)
	if err != nil {
		return nil, err
	}
	for attempt := 0; ; attempt++ {
		c, reused, err := p.get(ctx)
		if err != nil {
			return nil, err
		}
		page, err := c.open(ctx, p, p.opt.ReadTimeout, key, offsetKey, sizeKey, limit, maxBytes)
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

// open reads the front offset and the front of the list at key, at most limit events and
// maxBytes of them (see OpenPage), atomically, and reads the reply up to the events' element
// count: the page then has its Count and Offset, while its events may still be arriving. When
// there are none, or on an error, the connection goes back to pool (or is closed if its state
// is unknown) before open returns; otherwise the page keeps the connection, reads the events
// from it and gives it back at the end (see Page). The keys are in one slot, so this works on
// a cluster.
//
// The list's largest event (sizeKey, kept by the appends) decides how many: as many as fit in
// maxBytes were each that large, at most limit and at least one, read by one MULTI of GET
// offset and LRANGE under a WATCH of sizeKey (a larger event appended meanwhile aborts it, and
// it is read again). When the size is not known (a queue filled by a version that kept none),
// pageScript, which counts the bytes as it reads, at a higher cost to Redis than the LRANGE.
func (c *respConn) open(ctx context.Context, pool *nodePool, timeout time.Duration, key, offsetKey, sizeKey string, limit int, maxBytes int64) (result *Page, err error) {
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
	var line []byte
	var offset int64
	for attempt := 0; ; attempt++ {
		clean = false
		c.cmd = appendCommand(c.cmd[:0], "WATCH", sizeKey)
		c.cmd = appendCommand(c.cmd, "GET", sizeKey)
		if _, err := c.conn.Write(c.cmd); err != nil {
			return nil, err
		}
		if line, err = c.line(); err != nil {
			return nil, err
		}
		size, err := c.integer()
		if err != nil {
			if isRedisError(err) && line[0] == '-' { // a redirect: neither command ran
				clean = true
				return nil, redisError(line[1:])
			}
			return nil, err
		}
		if string(line) != "+OK" {
			return nil, fmt.Errorf("redis: unexpected reply %q", line)
		}
		if size <= 0 || attempt >= 2 {
			c.cmd = appendCommand(c.cmd[:0], "UNWATCH")
			c.cmd = appendCommand(c.cmd, "EVAL", pageSource, "2", key, offsetKey, strconv.Itoa(limit), strconv.FormatInt(maxBytes, 10))
			if _, err := c.conn.Write(c.cmd); err != nil {
				return nil, err
			}
			if line, err = c.line(); err != nil {
				return nil, err
			}
			if string(line) != "+OK" {
				return nil, fmt.Errorf("redis: unexpected reply %q", line)
			}
		} else {
			c.cmd = appendCommand(c.cmd[:0], "MULTI")
			c.cmd = appendCommand(c.cmd, "GET", offsetKey)
			n := max(1, min(int64(limit), (maxBytes+1)/(size+1)))
			c.cmd = appendCommand(c.cmd, "LRANGE", key, "0", strconv.FormatInt(n-1, 10))
			c.cmd = appendCommand(c.cmd, "EXEC")
			if _, err := c.conn.Write(c.cmd); err != nil {
				return nil, err
			}
			// +OK, then +QUEUED or an error for each command, then EXEC's reply:
			// -EXECABORT when a command was refused (the first refusal is returned), *-1 when
			// the size changed since the WATCH, or an array of the two replies.
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
			if refused != nil { // EXECABORT follows
				if _, err := c.line(); err != nil {
					return nil, err
				}
				clean = true
				return nil, refused
			}
		}
		// The script's reply or EXEC's: an error, *-1 (aborted), or the offset and the events.
		if line, err = c.line(); err != nil {
			return nil, err
		}
		if line[0] == '-' {
			clean = true
			return nil, redisError(line[1:])
		}
		if string(line) == "*-1" {
			continue // a larger event came in since the WATCH: its size decides again
		}
		if string(line) != "*2" {
			return nil, fmt.Errorf("redis: unexpected reply %q", line)
		}
		if offset, err = c.integer(); err != nil {
			return nil, err // the events' reply is still to come: the connection is closed
		}
		if line, err = c.line(); err != nil {
			return nil, err
		}
		if len(line) > 0 && line[0] == '-' {
			clean = true
			return nil, redisError(line[1:])
		}
		break
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
