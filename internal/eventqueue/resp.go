package eventqueue

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// respArrayWriter turns the raw RESP reply of LRANGE (an array of bulk strings), written to
// it in chunks of any size, into the comma-separated elements written to out.
type respArrayWriter struct {
	out     io.Writer
	header  func(count int)
	state   int
	line    []byte // a header line being assembled
	left    int    // payload bytes still to copy, or CRLF bytes still to skip
	count   int    // elements announced
	seen    int    // elements started
	err     error
	scratch []byte
}

var comma = []byte{','}

const (
	respArrayHeader = iota
	respBulkHeader
	respPayload
	respPayloadEnd
	respDone
)

func (w *respArrayWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 && w.err == nil {
		switch w.state {
		case respArrayHeader, respBulkHeader:
			i := bytes.IndexByte(p, '\n')
			if i < 0 {
				w.line = append(w.line, p...)
				p = nil
				continue
			}
			w.line = append(w.line, p[:i+1]...)
			p = p[i+1:]
			w.parseLine()
			w.line = w.line[:0]
		case respPayload:
			k := min(w.left, len(p))
			if _, err := w.out.Write(p[:k]); err != nil {
				w.err = err
			}
			p, w.left = p[k:], w.left-k
			if w.left == 0 {
				w.state, w.left = respPayloadEnd, 2
			}
		case respPayloadEnd:
			k := min(w.left, len(p))
			p, w.left = p[k:], w.left-k
			if w.left == 0 {
				w.next()
			}
		case respDone:
			w.err = errors.New("data after the reply")
		}
	}
	if w.err != nil {
		return n - len(p), w.err
	}
	return n, nil
}

// ReadFrom lets io.Copy hand payloads over without allocating a buffer per element.
func (w *respArrayWriter) ReadFrom(r io.Reader) (int64, error) {
	if w.scratch == nil {
		w.scratch = make([]byte, 32<<10)
	}
	var total int64
	for {
		n, err := r.Read(w.scratch)
		if n > 0 {
			if _, werr := w.Write(w.scratch[:n]); werr != nil {
				return total, werr
			}
			total += int64(n)
		}
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

func (w *respArrayWriter) parseLine() {
	line := w.line
	if len(line) < 3 || line[len(line)-2] != '\r' {
		w.err = fmt.Errorf("bad line %q", line)
		return
	}
	n, err := strconv.Atoi(string(line[1 : len(line)-2]))
	switch {
	case w.state == respArrayHeader && line[0] == '*' && err == nil && n >= 0:
		w.count = n
		w.header(n)
		w.next()
	case w.state == respBulkHeader && line[0] == '$' && err == nil && n >= 0:
		if w.seen > 0 {
			if _, err := w.out.Write(comma); err != nil {
				w.err = err
			}
		}
		w.seen++
		w.state, w.left = respPayload, n
		if n == 0 {
			w.state, w.left = respPayloadEnd, 2
		}
	case line[0] == '-':
		w.err = fmt.Errorf("redis: %s", line[1:len(line)-2])
	default:
		w.err = fmt.Errorf("unexpected line %q", line)
	}
}

// next moves to the next element's header, or to done after the last one.
func (w *respArrayWriter) next() {
	if w.seen == w.count {
		w.state = respDone
		return
	}
	w.state = respBulkHeader
}

func (w *respArrayWriter) finish() error {
	if w.err != nil {
		return w.err
	}
	if w.state != respDone {
		return errors.New("reply ended early")
	}
	return nil
}
