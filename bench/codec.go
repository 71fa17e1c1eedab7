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
// The encoder and the decoder are made once and reset for each try, as the api pools its
// encoders and a client keeps its decoder: their making is not timed.
func fastestCodec(coding string, body []byte) (time.Duration, error) {
	var buf bytes.Buffer
	var enc interface {
		io.WriteCloser
		Reset(io.Writer)
	}
	var dec func(b []byte) ([]byte, error)
	switch coding {
	case "gzip":
		gw, err := gzip.NewWriterLevel(nil, flate.BestSpeed)
		if err != nil {
			return 0, err
		}
		gr := new(gzip.Reader)
		enc, dec = gw, func(b []byte) ([]byte, error) {
			if err := gr.Reset(bytes.NewReader(b)); err != nil {
				return nil, err
			}
			return io.ReadAll(gr)
		}
	case "zstd":
		zw, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1), zstd.WithEncoderLevel(zstd.SpeedFastest))
		if err != nil {
			return 0, err
		}
		zr, err := zstd.NewReader(nil)
		if err != nil {
			return 0, err
		}
		defer zr.Close()
		enc, dec = zw, func(b []byte) ([]byte, error) { return zr.DecodeAll(b, nil) }
	default:
		return 0, fmt.Errorf("codec: unknown coding %q", coding)
	}
	var best time.Duration
	for try := range codecTries {
		buf.Reset()
		start := time.Now()
		enc.Reset(&buf)
		if _, err := enc.Write(body); err != nil {
			return 0, err
		}
		if err := enc.Close(); err != nil {
			return 0, err
		}
		plain, err := dec(buf.Bytes())
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
