package eventqueue

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// Page is the events of one read: the inside of a JSON array, as slices of the buffers the
// Redis reply was read into, so that the events are not copied in user space between Redis
// and the HTTP client. Release hands the buffers back once the page is written.
//
// A page from OpenPage comes back as soon as Redis's reply has given its Count and Offset,
// its events still to be read from the connection (Pending): Stream writes them out as they
// arrive, so that the client receives the first events while Redis still sends the last, and
// Fill reads them all instead. Events and Size are valid once the page is not pending; after
// Stream, Events holds only what its last call wrote, and the chunks of the events written
// before went back to the pool as the page went on.
type Page struct {
	Count  int         // events
	Offset int64       // the queue's front offset: absolute position of the first event
	Events net.Buffers // the events, comma-separated, in order
	Size   int         // bytes in Events
	chunks [][]byte
	rest   *pageRest // while the events are still on the connection
	done   func()    // OnRelease's
}

// pageRest is what a pending page needs to read its events.
type pageRest struct {
	ctx     context.Context
	c       *respConn
	pool    *nodePool // nil in tests
	timeout time.Duration
	n       int // elements to read
	unwatch func() bool
	write   func(bufs net.Buffers, last bool) error // Stream's, while it runs: Events holds what is not written yet
	slot    bool                                    // holds one of pool's streaming slots
}

// Pending reports whether the page's events are still to be read (see Page).
func (p *Page) Pending() bool { return p.rest != nil }

// Fill reads every event of a pending page.
func (p *Page) Fill() error {
	if p.rest == nil {
		return nil
	}
	return p.finish(p.rest.c.elements(p.rest.n))
}

// Stream passes the page's events to write, in order, as they arrive from Redis: each call
// carries the bytes read since the previous one (possibly none on the last), and last is set
// on the final call. write must not keep or modify bufs. An error of the read or of write ends
// it; the page must still be released.
//
// The connection to Redis is busy until the client has taken the page, so only half of a
// node's connections stream at once; when none is free, the page is read whole first.
func (p *Page) Stream(write func(bufs net.Buffers, last bool) error) error {
	r := p.rest
	if r != nil && r.pool != nil {
		select {
		case r.pool.streams <- struct{}{}:
			r.slot = true
		default:
			r = nil // read it whole
		}
	}
	if r == nil {
		if err := p.Fill(); err != nil {
			return err
		}
		return write(p.Events, true)
	}
	r.write = write
	if err := p.finish(r.c.elements(r.n)); err != nil {
		return err
	}
	return write(p.Events, true)
}

// flush writes the events read since the last flush, while streaming; called by the reader
// before it waits for more of the reply. A slow client holds the read: Redis's deadline is
// renewed after each write, as the connection is not idle but waiting for the client.
func (r *pageRest) flush(p *Page) error {
	if r.write == nil || len(p.Events) == 0 {
		return nil
	}
	if err := r.write(p.Events, false); err != nil {
		return err
	}
	// Written events are dropped: no event left points into the chunks read before this
	// one, which fill hands back to the pool, so a streamed page holds one or two chunks
	// however large it is.
	clear(p.Events)
	p.Events = p.Events[:0]
	if r.timeout > 0 {
		r.c.conn.SetReadDeadline(time.Now().Add(r.timeout))
	}
	return nil
}

// finish ends the reading of the page's events with err (nil: all read): the connection goes
// back to its pool when the reply was read whole and in time, and is closed otherwise.
func (p *Page) finish(err error) error {
	r := p.rest
	p.rest = nil
	c := r.c
	c.page = nil
	p.take(c.buf) // the events may point into the last chunk
	c.buf, c.r, c.w = nil, 0, 0
	if !r.unwatch() && err == nil {
		err = r.ctx.Err() // the read is complete, but the connection must not be reused
	}
	if r.pool != nil {
		if err == nil {
			r.pool.put(c)
		} else {
			r.pool.discard(c)
		}
		if r.slot {
			<-r.pool.streams
		}
	}
	if err != nil {
		return fmt.Errorf("eventqueue: read: %w", err)
	}
	return nil
}

// written reports whether the page is streaming and has written every event read so far.
func (p *Page) written() bool {
	r := p.rest
	return r != nil && r.write != nil && len(p.Events) == 0
}

func (p *Page) add(b []byte) {
	if len(b) > 0 {
		p.Events = append(p.Events, b)
		p.Size += len(b)
	}
}

// take makes the page the owner of chunk, returned to the pool by Release.
func (p *Page) take(chunk []byte) {
	if chunk != nil {
		p.chunks = append(p.chunks, chunk)
	}
}

// WriteTo writes the events to w, with writev on a TCP connection. A page is written once:
// net.Buffers.WriteTo advances the slices it has written.
func (p *Page) WriteTo(w io.Writer) (int64, error) {
	if err := p.Fill(); err != nil {
		return 0, err
	}
	bufs := p.Events
	return bufs.WriteTo(w)
}

// Release returns the page's buffers for reuse; the page must not be used afterwards.
func (p *Page) Release() {
	if p.rest != nil {
		p.finish(errors.New("released unread")) // the rest of the reply is on the connection: close it
	}
	for _, c := range p.chunks {
		putChunk(c)
	}
	done := p.done
	*p = Page{}
	if done != nil {
		done()
	}
}

// OnRelease has Release call f, once the page's buffers are given back.
func (p *Page) OnRelease(f func()) { p.done = f }

// chunkSize is the size of the buffers replies are read into: a full queue of 380-byte events
// takes about 15, each filled by a few large reads.
const chunkSize = 256 << 10

var chunks = sync.Pool{New: func() any { return new([chunkSize]byte) }}

func getChunk() []byte { return chunks.Get().(*[chunkSize]byte)[:] }

func putChunk(c []byte) {
	if cap(c) == chunkSize {
		chunks.Put((*[chunkSize]byte)(c[:chunkSize]))
	}
}
