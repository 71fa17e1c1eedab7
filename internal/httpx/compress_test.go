package httpx

import (
	"bytes"
	"compress/gzip"
	"hash/crc32"
	"io"
	"net"
	"testing"

	"github.com/eventq/eventq/internal/testenv"
	"github.com/klauspost/compress/zstd"
)

// decoder decodes compressed bodies with the standard library's gzip reader (which checks the
// trailer's CRC-32 and length, and is held to one member here) or klauspost's zstd decoder
// (which reads every frame).
type decoder struct {
	gz   *gzip.Reader
	zstd *zstd.Decoder
	out  bytes.Buffer
}

func (d *decoder) decode(t *testing.T, coding string, b []byte) []byte {
	t.Helper()
	d.out.Reset()
	switch coding {
	case "gzip":
		var err error
		if d.gz == nil {
			d.gz, err = gzip.NewReader(bytes.NewReader(b))
		} else {
			err = d.gz.Reset(bytes.NewReader(b))
		}
		if err != nil {
			t.Fatal(err)
		}
		d.gz.Multistream(false)
		if _, err := d.out.ReadFrom(d.gz); err != nil {
			t.Fatal(err)
		}
	case "zstd":
		if d.zstd == nil {
			d.zstd, _ = zstd.NewReader(nil, zstd.WithDecoderConcurrency(1))
		}
		out, err := d.zstd.DecodeAll(b, d.out.Bytes()[:0])
		if err != nil {
			t.Fatal(err)
		}
		return out
	default:
		t.Fatalf("coding %q", coding)
	}
	return d.out.Bytes()
}

// Pages of every size cut into segments at every offset decode to the identity document byte
// for byte, in both codings: every page of 1 to 250 events in segments of 64 bytes (up to 12
// segments, the last of any length), every page of 1 to 60 events and around the first
// boundary (1,340–1,400) and the largest page (10,000 events) in segments of 4 KiB.
// The events are the smallest JSON object to keep the test fast (the work grows with the
// square of the count); the segmenting does not depend on what the bytes are. make chaos
// (testenv.Long) takes every size from 1 to 10,000 in segments of 4 KiB.
func TestCompressedBodyEveryPageSize(t *testing.T) {
	const n = 10000
	type page struct{ size, seg int }
	var pages []page
	for size := 1; size <= 250; size++ {
		pages = append(pages, page{size, 64})
	}
	for size := 1; size <= n; size++ {
		if size <= 60 || (size >= 1340 && size <= 1400) || size == n || testenv.Long() {
			pages = append(pages, page{size, 4 << 10})
		}
	}
	events := make([][]byte, n)
	for i := range events {
		events[i] = []byte(`{}`)
	}
	for _, coding := range []string{"gzip", "zstd"} {
		t.Run(coding, func(t *testing.T) {
			t.Parallel()
			var d decoder
			for _, p := range pages {
				all := net.Buffers{[]byte(`{"data":{"events":[`)}
				var identity []byte
				identity = append(identity, all[0]...)
				for i, ev := range events[:p.size] {
					if i > 0 {
						all = append(all, commaBytes)
						identity = append(identity, ',')
					}
					all = append(all, ev)
					identity = append(identity, ev...)
				}
				all = append(all, pageSuffix)
				identity = append(identity, pageSuffix...)
				released := 0
				body := CompressBody(coding, all, p.seg, func() { released++ })
				b, err := io.ReadAll(body)
				body.Close()
				if err != nil {
					t.Fatal(err)
				}
				if released != 1 {
					t.Fatalf("%d events in %d-byte segments: released %d times", p.size, p.seg, released)
				}
				if got := d.decode(t, coding, b); !bytes.Equal(got, identity) {
					t.Fatalf("%d events in %d-byte segments: decoded %d bytes differ from the identity's %d", p.size, p.seg, len(got), len(identity))
				}
			}
		})
	}
}

var commaBytes = []byte{','}

// crc32Combine gives the CRC-32 of the concatenation, for pieces of any length.
func TestCRC32Combine(t *testing.T) {
	data := bytes.Repeat([]byte("eventq crc combine 0123456789"), 1000)
	for _, cut := range []int{0, 1, 7, 8, 1000, len(data) - 1, len(data)} {
		a, b := data[:cut], data[cut:]
		got := crc32Combine(crc32.ChecksumIEEE(a), crc32.ChecksumIEEE(b), int64(len(b)))
		if want := crc32.ChecksumIEEE(data); got != want {
			t.Fatalf("cut at %d: %08x, want %08x", cut, got, want)
		}
	}
}

// A body closed before it was read (the client went away) waits for the segments being
// compressed before it releases the page, and compresses no further segment.
func TestCompressedBodyClosedEarly(t *testing.T) {
	parts := make(net.Buffers, 0, 400)
	for range 400 {
		parts = append(parts, bytes.Repeat([]byte{'x'}, 4<<10))
	}
	for _, coding := range []string{"gzip", "zstd"} {
		released := false
		body := CompressBody(coding, parts, 4<<10, func() { released = true })
		var first [1]byte
		if _, err := body.Read(first[:]); err != nil {
			t.Fatal(err)
		}
		body.Close()
		if !released {
			t.Fatalf("%s: not released", coding)
		}
		compressed := 0
		for _, s := range body.segs {
			select {
			case <-s.done:
			default:
				t.Fatalf("%s: a segment still running after Close", coding)
			}
			if s.out != nil {
				t.Fatalf("%s: a segment's buffer was not returned", coding)
			}
			if s.crc != 0 || coding == "zstd" {
				compressed++
			}
		}
		if coding == "gzip" && compressed == len(body.segs) {
			t.Fatalf("%s: every one of %d segments was compressed after Close", coding, compressed)
		}
	}
}

// pageSuffix ends a page document, as the routes write it.
var pageSuffix = []byte("]}}")
