package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"time"
)

// respConn is a raw RESP connection: the floor with no client library at all.
type respConn struct {
	c   net.Conn
	r   *bufio.Reader
	buf []byte
}

func dialRESP(addr string) (*respConn, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	return &respConn{c: c, r: bufio.NewReaderSize(c, 256<<10), buf: make([]byte, 0, 8<<20)}, nil
}

// lrange sends LRANGE key 0 stop and reads every element into one buffer; it returns the
// element count.
func (r *respConn) lrange(key string, stop int) (int, error) {
	n, _, err := r.lrangeTimed(key, stop)
	return n, err
}

// lrangeTimed is lrange that also returns how long the reply's first byte took to arrive.
func (r *respConn) lrangeTimed(key string, stop int) (int, time.Duration, error) {
	start := time.Now()
	if _, err := r.c.Write(respCommands([]string{"LRANGE", key, "0", strconv.Itoa(stop)})); err != nil {
		return 0, 0, err
	}
	if _, err := r.r.Peek(1); err != nil {
		return 0, 0, err
	}
	first := time.Since(start)
	n, err := r.elements()
	return n, first, err
}

// multiLRange reads the front offset and LRANGE key 0 stop in one MULTI/EXEC, as a read must
// to send the offset before the events, and reads every element into one buffer; it returns
// the element count.
func (r *respConn) multiLRange(key, offsetKey string, stop int) (int, error) {
	cmd := respCommands([]string{"MULTI"}, []string{"GET", offsetKey}, []string{"LRANGE", key, "0", strconv.Itoa(stop)}, []string{"EXEC"})
	if _, err := r.c.Write(cmd); err != nil {
		return 0, err
	}
	for _, want := range []string{"+OK\r\n", "+QUEUED\r\n", "+QUEUED\r\n", "*2\r\n"} {
		if line, err := r.r.ReadSlice('\n'); err != nil || string(line) != want {
			return 0, fmt.Errorf("resp: %q, %v; want %q", line, err, want)
		}
	}
	line, err := r.r.ReadSlice('\n') // GET's reply: $-1, or $n and the offset
	if err != nil {
		return 0, err
	}
	if string(line) != "$-1\r\n" {
		if _, err := r.r.ReadSlice('\n'); err != nil {
			return 0, err
		}
	}
	return r.elements()
}

// respCommands encodes each command as a RESP array of bulk strings, one after the other.
func respCommands(cmds ...[]string) []byte {
	var b []byte
	for _, args := range cmds {
		b = fmt.Appendf(b, "*%d\r\n", len(args))
		for _, a := range args {
			b = fmt.Appendf(b, "$%d\r\n%s\r\n", len(a), a)
		}
	}
	return b
}

// elements reads an array of bulk strings into one buffer and returns its length.
func (r *respConn) elements() (int, error) {
	n, err := r.header('*')
	if err != nil {
		return 0, err
	}
	r.buf = r.buf[:0]
	for range n {
		size, err := r.header('$')
		if err != nil {
			return 0, err
		}
		start := len(r.buf)
		r.buf = slices.Grow(r.buf, size+2)[:start+size+2]
		if _, err := io.ReadFull(r.r, r.buf[start:]); err != nil {
			return 0, err
		}
		r.buf = r.buf[:len(r.buf)-2]
	}
	return n, nil
}

func (r *respConn) header(kind byte) (int, error) {
	line, err := r.r.ReadSlice('\n')
	if err != nil {
		return 0, err
	}
	if len(line) < 3 || line[0] != kind {
		return 0, fmt.Errorf("resp: unexpected reply %q", line)
	}
	return strconv.Atoi(string(line[1 : len(line)-2]))
}

func (r *respConn) close() { r.c.Close() }
