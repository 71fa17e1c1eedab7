package main

import (
	"bytes"
	"fmt"
	"io"
	"time"

	"github.com/klauspost/compress/flate"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

// codecTries is how many times fastestCodec encodes and decodes a page; the fastest counts.
const codecTries = 5

// fastestCodec is the fastest of codecTries in-process encodes of body with coding, at the
// api's level (the encoders' fastest), each followed by its decode with the client's decoder:
// what compression adds to a read at the least, with no HTTP, no overlap and no second core.
func fastestCodec(coding string, body []byte) (time.Duration, error) {
	var best time.Duration
	var buf bytes.Buffer
	for try := range codecTries {
		buf.Reset()
		start := time.Now()
		var w io.WriteCloser
		switch coding {
		case "gzip":
			gw, err := gzip.NewWriterLevel(&buf, flate.BestSpeed)
			if err != nil {
				return 0, err
			}
			w = gw
		case "zstd":
			zw, err := zstd.NewWriter(&buf, zstd.WithEncoderConcurrency(1), zstd.WithEncoderLevel(zstd.SpeedFastest))
			if err != nil {
				return 0, err
			}
			w = zw
		default:
			return 0, fmt.Errorf("codec: unknown coding %q", coding)
		}
		if _, err := w.Write(body); err != nil {
			return 0, err
		}
		if err := w.Close(); err != nil {
			return 0, err
		}
		plain, err := decode(coding, buf.Bytes())
		if err != nil {
			return 0, err
		}
		took := time.Since(start)
		if !bytes.Equal(plain, body) {
			return 0, fmt.Errorf("codec: %s does not decode to the page", coding)
		}
		if try == 0 || took < best {
			best = took
		}
	}
	return best, nil
}
