package eventqueue

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// The RESP reading and writing of readconn.go's connections: replies parsed as they arrive.

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

// bulk reads a bulk string and appends it to dst; a nil bulk string appends nothing.
func (c *respConn) bulk(dst []byte) ([]byte, error) {
	line, err := c.line()
	if err != nil {
		return dst, err
	}
	size, null, err := header(line, '$')
	if err != nil || null {
		return dst, err
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
		size, null, err := header(line, '$')
		if err != nil || null {
			return nil, err
		}
		b, err := c.bulkBody(make([]byte, 0, size), size)
		return string(b), err
	case '*':
		n, null, err := header(line, '*')
		if err != nil || null {
			return nil, err
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

// header parses a "$N" or "*N" header, or its null form ("$-1", "*-1").
func header(line []byte, kind byte) (n int, null bool, err error) {
	if len(line) == 3 && line[0] == kind && line[1] == '-' && line[2] == '1' {
		return 0, true, nil
	}
	n, ok := parseLen(line, kind)
	if !ok {
		return 0, false, fmt.Errorf("redis: unexpected reply %q", line)
	}
	return n, false, nil
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
