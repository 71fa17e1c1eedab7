package routes

import (
	"bytes"
	"compress/gzip"
	"hash/crc32"
	"io"
	"net"
	"testing"

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

// Every page size from 1 to 10,000 events, cut into segments of 4 KiB so that sizes around
// every segment boundary occur, decodes to the identity document byte for byte, in both
// codings. The events are the smallest JSON object to keep the test fast (the work grows with
// the square of the count); the segmenting does not depend on what the bytes are. Under the
// race detector (make test) it takes every size up to 200, every size around the first
// segment boundary (1,300–1,420), every 97th and the last; without it (go test ./routes/),
// every size.
func TestCompressedBodyEveryPageSize(t *testing.T) {
	const n = 10000
	events := make([][]byte, n)
	for i := range events {
		events[i] = []byte(`{}`)
	}
	for _, coding := range []string{"gzip", "zstd"} {
		t.Run(coding, func(t *testing.T) {
			t.Parallel()
			var identity []byte
			var d decoder
			parts := net.Buffers{[]byte(`{"data":{"events":[`)}
			for size := 1; size <= n; size++ {
				if size > 1 {
					parts = append(parts, commaBytes)
				}
				parts = append(parts, events[size-1])
				all := append(parts[:len(parts):len(parts)], pageSuffix)
				identity = identity[:0]
				for _, p := range all {
					identity = append(identity, p...)
				}
				if raceEnabled && size > 200 && (size < 1300 || size > 1420) && size%97 != 0 && size != n {
					continue
				}
				released := 0
				body := compressBody(coding, all, 4<<10, func() { released++ })
				b, err := io.ReadAll(body)
				body.Close()
				if err != nil {
					t.Fatal(err)
				}
				if released != 1 {
					t.Fatalf("%d events: released %d times", size, released)
				}
				if got := d.decode(t, coding, b); !bytes.Equal(got, identity) {
					t.Fatalf("%d events: decoded %d bytes differ from the identity's %d", size, len(got), len(identity))
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
		body := compressBody(coding, parts, 4<<10, func() { released = true })
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
