package httpx

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/klauspost/compress/zstd"

	"github.com/eventq/eventq/models"
)

// benchPage is a full page of 10,000 queue events of 380 bytes, like the bench's.
func benchPage() net.Buffers {
	parts := net.Buffers{[]byte(`{"data":{"count":10000,"events":[`)}
	now := time.Now().UTC()
	for i := range 10000 {
		member := strconv.Itoa(1000 + i%97)
		e := models.TrackedEvent{
			ID: uuid.Must(uuid.NewV7()).String(), TenantID: 1, Type: "page_view",
			SessionID: fmt.Sprintf("s-%08x", i/7), URL: fmt.Sprintf("https://shop.example/p/%d?ref=mail", i%500),
			PageHostname: "shop.example", PagePath: fmt.Sprintf("/p/%d", i%500),
			UserAgent: "Mozilla/5.0 (X11; Linux x86_64)", IPAddress: "203.0.113.7", EventSequence: int64(i % 7), CreatedAt: now,
		}
		if i%3 == 0 {
			e.AudienceMemberID = &member
		}
		if pad := 380 - len(e.MarshalQueue()) - len("&c="); pad >= 0 {
			e.URL += "&c=" + strings.Repeat("x", pad)
		}
		b := e.MarshalQueue()
		if i > 0 {
			b = append([]byte{','}, b...)
		}
		parts = append(parts, b)
	}
	return append(parts, pageSuffix)
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkCompressBody reports, per full page, the wall time and the CPU time (cpu-ms/op)
// of compressing it in segments as a read does, and of a client decoding the result (the
// standard library's gzip, klauspost's zstd), for each coding: the CPU a compressed read adds
// to an identity one, on the server and on the client.
func BenchmarkCompressBody(b *testing.B) {
	page := benchPage()
	for _, coding := range []string{"gzip", "zstd"} {
		b.Run(coding, func(b *testing.B) {
			start := cpuTime()
			for b.Loop() {
				body := CompressBody(coding, page, SegmentSize, nil)
				io.Copy(io.Discard, body)
				body.Close()
			}
			b.ReportMetric(float64(cpuTime()-start)/float64(b.N)/1e6, "cpu-ms/op")
		})
		body := CompressBody(coding, page, SegmentSize, nil)
		encoded, _ := io.ReadAll(body)
		body.Close()
		b.Run(coding+"-decode", func(b *testing.B) {
			gz, _ := gzip.NewReader(bytes.NewReader(encoded))
			zd, _ := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1))
			defer zd.Close()
			var out []byte
			start := cpuTime()
			for b.Loop() {
				if coding == "gzip" {
					gz.Reset(bytes.NewReader(encoded))
					io.Copy(io.Discard, gz)
				} else {
					out, _ = zd.DecodeAll(encoded, out[:0])
				}
			}
			b.ReportMetric(float64(cpuTime()-start)/float64(b.N)/1e6, "cpu-ms/op")
		})
	}
}
