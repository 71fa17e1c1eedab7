package eventqueue

import (
	"io"
	"net"
	"sync"
)

// Page is the events of one read: the inside of a JSON array, as slices of the buffers the
// Redis reply was read into, so that the events are not copied in user space between Redis
// and the HTTP client. Release hands the buffers back once the page is written.
type Page struct {
	Count  int         // events
	Offset int64       // the queue's front offset: absolute position of the first event
	Events net.Buffers // the events, comma-separated, in order
	Size   int         // bytes in Events
	chunks [][]byte
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
	bufs := p.Events
	return bufs.WriteTo(w)
}

// Release returns the page's buffers for reuse; the page must not be used afterwards.
func (p *Page) Release() {
	for _, c := range p.chunks {
		putChunk(c)
	}
	*p = Page{}
}

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
