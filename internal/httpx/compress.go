package httpx

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/klauspost/compress/flate"
	"github.com/klauspost/compress/zstd"
)

// A compressed read's body is cut into segments of about SegmentSize bytes that are compressed
// side by side, one per core, and written out in order as each is done, so that the client
// decodes the first while the last are still being compressed. The codings are chosen so that
// any decoder reads the result as one body:
//
//   - gzip: one gzip member holding one DEFLATE stream. Each segment is compressed on its own
//     and ends with a sync flush (byte-aligned, not final), the last with the final block, so
//     their concatenation is a valid stream (as pigz does); the trailer's CRC-32 is combined
//     from the segments' CRCs.
//   - zstd: one frame per segment. A zstd body may hold several frames; decoders return their
//     concatenation (RFC 8878, section 3).
//
// Segments do not share a history, which costs a little size (matches cannot reach into the
// previous segment): little at SegmentSize (docs/performance-log.md).

// Levels: the encoders' fastest levels. Against the default levels they cut the api's CPU per
// full page of typical events noticeably, and the body stays many times smaller than identity
// (docs/performance-log.md has the figures).
const (
	gzipLevel = flate.BestSpeed
	zstdLevel = zstd.SpeedFastest
)

// SegmentSize is the uncompressed size of one segment of a compressed body.
const SegmentSize = 256 << 10

var (
	flateWriters = sync.Pool{New: func() any {
		w, err := flate.NewWriter(nil, gzipLevel)
		if err != nil {
			panic(err) // only for an invalid level
		}
		return w
	}}
	zstdEncoders = sync.Pool{New: func() any {
		enc, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1), zstd.WithEncoderLevel(zstdLevel))
		if err != nil {
			panic(err) // only for invalid options
		}
		return enc
	}}
	outBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}
)

// gzipHeader is a gzip member's header: no name, no time, XFL 4 (fastest), OS unknown.
var gzipHeader = []byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 4, 0xff}

// segment is one piece of the body and, once done is closed, its compressed bytes.
type segment struct {
	parts net.Buffers
	size  int
	last  bool
	out   *bytes.Buffer
	crc   uint32 // gzip: CRC-32 of the uncompressed bytes
	done  chan struct{}
}

// compress encodes the segment with coding into a buffer from outBuffers.
func (s *segment) compress(coding string) {
	s.out = outBuffers.Get().(*bytes.Buffer)
	s.out.Reset()
	switch coding {
	case "gzip":
		w := flateWriters.Get().(*flate.Writer)
		w.Reset(s.out)
		for _, p := range s.parts {
			w.Write(p) // writes to a bytes.Buffer cannot fail
			s.crc = crc32.Update(s.crc, crc32.IEEETable, p)
		}
		if s.last {
			w.Close()
		} else {
			w.Flush()
		}
		flateWriters.Put(w)
	case "zstd":
		enc := zstdEncoders.Get().(*zstd.Encoder)
		enc.Reset(s.out)
		for _, p := range s.parts {
			enc.Write(p)
		}
		enc.Close()
		zstdEncoders.Put(enc)
	}
}

// CompressedBody is a body compressed segment by segment on up to GOMAXPROCS goroutines and
// read in order. Close waits for the goroutines, then calls release.
type CompressedBody struct {
	coding  string
	segs    []*segment
	next    int    // the segment Read takes next
	cur     []byte // unread bytes of what Read is copying out
	crc     uint32
	size    int64
	tail    [8]byte
	ended   bool
	stop    atomic.Bool
	wg      sync.WaitGroup
	release func()
}

// CompressBody starts compressing the concatenation of parts with coding ("gzip" or "zstd")
// in segments of at least segSize bytes. release (may be nil) is called by Close, once no
// goroutine reads parts any more.
func CompressBody(coding string, parts net.Buffers, segSize int, release func()) *CompressedBody {
	b := &CompressedBody{coding: coding, release: release}
	seg := &segment{done: make(chan struct{})}
	for _, p := range parts {
		if len(p) == 0 {
			continue
		}
		seg.parts = append(seg.parts, p)
		seg.size += len(p)
		if seg.size >= segSize {
			b.segs = append(b.segs, seg)
			seg = &segment{done: make(chan struct{})}
		}
	}
	if seg.size > 0 || len(b.segs) == 0 {
		b.segs = append(b.segs, seg)
	}
	b.segs[len(b.segs)-1].last = true
	if coding == "gzip" {
		b.cur = gzipHeader
	}
	var taken atomic.Int64
	workers := min(runtime.GOMAXPROCS(0), len(b.segs))
	b.wg.Add(workers)
	for range workers {
		go func() {
			defer b.wg.Done()
			for {
				i := int(taken.Add(1)) - 1
				if i >= len(b.segs) {
					return
				}
				if !b.stop.Load() {
					b.segs[i].compress(coding)
				}
				close(b.segs[i].done)
			}
		}()
	}
	return b
}

// Read copies out the compressed body, waiting for each segment in turn.
func (b *CompressedBody) Read(p []byte) (int, error) {
	for len(b.cur) == 0 {
		if b.ended {
			return 0, io.EOF
		}
		if b.next == len(b.segs) {
			b.ended = true
			if b.coding == "gzip" {
				binary.LittleEndian.PutUint32(b.tail[:4], b.crc)
				binary.LittleEndian.PutUint32(b.tail[4:], uint32(b.size))
				b.cur = b.tail[:]
			}
			continue
		}
		s := b.segs[b.next]
		<-s.done
		b.next++
		b.crc = crc32Combine(b.crc, s.crc, int64(s.size))
		b.size += int64(s.size)
		b.cur = s.out.Bytes()
	}
	n := copy(p, b.cur)
	b.cur = b.cur[n:]
	return n, nil
}

// Close stops the segments not started yet, waits for those being compressed, returns their
// buffers and calls release.
func (b *CompressedBody) Close() error {
	b.stop.Store(true)
	b.wg.Wait()
	for _, s := range b.segs {
		if s.out != nil {
			outBuffers.Put(s.out)
			s.out = nil
		}
	}
	b.cur = nil
	if b.release != nil {
		b.release()
		b.release = nil
	}
	return nil
}

// crc32Combine returns the CRC-32 (IEEE) of A followed by B from crc1 of A, crc2 of B and B's
// length (zlib's crc32_combine).
func crc32Combine(crc1, crc2 uint32, len2 int64) uint32 {
	if len2 <= 0 {
		return crc1
	}
	var even, odd [32]uint32
	odd[0] = crc32.IEEE // the operator for one zero bit
	row := uint32(1)
	for n := 1; n < 32; n++ {
		odd[n] = row
		row <<= 1
	}
	gf2Square(&even, &odd) // two zero bits
	gf2Square(&odd, &even) // four zero bits
	for {
		gf2Square(&even, &odd)
		if len2&1 != 0 {
			crc1 = gf2Times(&even, crc1)
		}
		if len2 >>= 1; len2 == 0 {
			break
		}
		gf2Square(&odd, &even)
		if len2&1 != 0 {
			crc1 = gf2Times(&odd, crc1)
		}
		if len2 >>= 1; len2 == 0 {
			break
		}
	}
	return crc1 ^ crc2
}

func gf2Times(mat *[32]uint32, vec uint32) uint32 {
	var sum uint32
	for i := 0; vec != 0; i, vec = i+1, vec>>1 {
		if vec&1 != 0 {
			sum ^= mat[i]
		}
	}
	return sum
}

func gf2Square(square, mat *[32]uint32) {
	for n := range 32 {
		square[n] = gf2Times(mat, mat[n])
	}
}
