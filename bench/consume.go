package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

	"github.com/eventq/eventq/internal/clock"
	"github.com/eventq/eventq/internal/consume"
	"github.com/eventq/eventq/internal/eventqueue"
	"github.com/eventq/eventq/internal/features"
	"github.com/eventq/eventq/internal/metrics"
	"github.com/eventq/eventq/internal/tracking"
	"github.com/eventq/eventq/models"
)

// LongPoll is scenario 7: a consumer waiting on its empty queue (GET ?wait=20) while Waiters
// other consumers wait on theirs on the same api; each of Wakeups tracks answers the waiting
// read. Latency runs from the track's 202 to the waiting read's answer.
type LongPoll struct {
	Waiters       int     `json:"waiters"`
	Wakeups       int     `json:"wakeups"`
	Latency       Latency `json:"track_202_to_read_answer"`
	TargetP50     float64 `json:"target_p50_ms"`
	TargetP99     float64 `json:"target_p99_ms"`
	Met           bool    `json:"met"`
	RSSIdleMiB    float64 `json:"api_rss_idle_mib"`
	RSSWaitingMiB float64 `json:"api_rss_waiting_mib"` // with Waiters reads held
	Errors        int     `json:"errors"`
}

// CodingCost is what one content coding costs for a full page (scenario 8).
type CodingCost struct {
	Coding       string  `json:"coding"`
	WireBytes    int     `json:"wire_bytes"`
	Client       Latency `json:"client"`              // request sent → body read and decoded
	APICPUMsPage float64 `json:"api_cpu_ms_per_page"` // user+system time of the api process
	Ratio        float64 `json:"ratio_median"`        // client median / floor median
	// CodecMs is the fastest in-process encode and decode of the same page (fastestCodec);
	// Bound is the identity read's median plus it, and BoundRatio the median against Bound.
	CodecMs    float64 `json:"codec_ms,omitempty"`
	Bound      float64 `json:"bound_ms,omitempty"`
	BoundRatio float64 `json:"ratio_to_bound,omitempty"`
}

// Compression is scenario 8: the same full queue read with each coding, each read timed until
// the client has decoded the whole body, interleaved with the floor (the same LRANGE over a
// bare RESP connection).
type Compression struct {
	Events     int          `json:"events"`
	Iterations int          `json:"iterations"`
	Floor      Latency      `json:"floor_raw_resp"`
	Codings    []CodingCost `json:"codings"`
	Target     float64      `json:"target_ratio_max"`      // for gzip and zstd, of CodingCost.BoundRatio
	TargetSize float64      `json:"target_size_ratio_max"` // compressed bytes / identity bytes
}

// Rebuild is scenario 9: eventq queue rebuild of one tenant whose queue Redis lost.
type Rebuild struct {
	Database      string  `json:"database"`
	Events        int     `json:"events"`
	Seconds       float64 `json:"seconds"`
	SettleSeconds float64 `json:"settle_seconds"` // the fixed wait for in-flight requests, included
	EventsPerSec  float64 `json:"events_per_second"`
}

// cpuTime is the process's user+system CPU time so far.
func cpuTime(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:]) // fields from 3 (state) on
	if len(fields) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(fields[11], 10, 64)      // field 14
	stime, _ := strconv.ParseInt(fields[12], 10, 64)      // field 15
	return time.Duration(utime+stime) * time.Second / 100 // USER_HZ is 100 on Linux
}

// benchLongPoll runs scenario 7.
func benchLongPoll(ctx context.Context, s *stack, waiters, wakeups int) (*LongPoll, error) {
	res := &LongPoll{Waiters: waiters, Wakeups: wakeups, TargetP50: 5, TargetP99: 25}
	measured, err := s.seedTenant(ctx, "", true)
	if err != nil {
		return nil, err
	}
	others := make([]*tenant, waiters)
	for i := range others {
		if others[i], err = s.seedTenant(ctx, "", true); err != nil {
			return nil, err
		}
	}
	res.RSSIdleMiB = rssMiB(s.api.pid())

	wctx, stopWaiters := context.WithCancel(ctx)
	defer stopWaiters()
	var wg sync.WaitGroup
	for _, t := range others {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for wctx.Err() == nil { // each waits 20 s, then waits again
				res, err := s.http.Do(s.request(wctx, "GET", "/api/platform/events?wait=20", t.Token, nil))
				if err != nil {
					sleepCtx(wctx, 100*time.Millisecond)
					continue
				}
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
			}
		}()
	}
	defer wg.Wait()
	if err := sleepCtx(ctx, 3*time.Second); err != nil { // every waiter is held by now
		return nil, err
	}
	res.RSSWaitingMiB = rssMiB(s.api.pid())

	body, _ := json.Marshal(map[string]any{"site_key": measured.SiteKey, "events": []map[string]any{{
		"type": "page_view", "session_id": "s-longpoll", "url": "https://shop.example/a", "event_sequence": 1}}})
	var lat []time.Duration
	for i := 0; i < wakeups; i++ {
		type answer struct {
			at  time.Time
			err error
		}
		got := make(chan answer, 1)
		go func() {
			res, err := s.http.Do(s.request(ctx, "GET", "/api/platform/events?wait=20", measured.Token, nil))
			if err == nil {
				_, err = io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if err == nil && res.StatusCode != 200 {
					err = fmt.Errorf("status %d", res.StatusCode)
				}
			}
			got <- answer{time.Now(), err}
		}()
		if err := sleepCtx(ctx, 20*time.Millisecond); err != nil { // the read is waiting
			return nil, err
		}
		req := s.request(ctx, "POST", "/api/track", "", body)
		req.Header.Set("Content-Type", "application/json")
		if err := expect(s.http, req, 202); err != nil {
			return nil, fmt.Errorf("track: %w", err)
		}
		accepted := time.Now()
		a := <-got
		if a.err != nil {
			res.Errors++
			continue
		}
		lat = append(lat, max(a.at.Sub(accepted), 0))
		if err := expect(s.http, s.request(ctx, "DELETE", "/api/platform/events?count=1", measured.Token, nil), 204); err != nil {
			return nil, err
		}
	}
	res.Latency = summarize(lat)
	res.Met = res.Latency.P50 <= res.TargetP50 && res.Latency.P99 <= res.TargetP99
	stopWaiters()
	return res, nil
}

// benchCompression runs scenario 8 on tenant t, whose queue is full. Each round reads the queue
// straight from Redis and then through the api once with each coding, so that every figure
// shares the machine's state of that moment.
func benchCompression(ctx context.Context, s *stack, t *tenant, iterations int) (*Compression, error) {
	res := &Compression{Events: queueEvents, Iterations: iterations, Target: 1.1, TargetSize: 0.25}
	key := eventqueue.Key(t.ID)
	raw, err := dialRESP(s.rdb.Options().Addr)
	if err != nil {
		return nil, err
	}
	defer raw.close()
	codings := []string{"identity", "gzip", "zstd"}
	zd, err := zstd.NewReader(nil)
	if err != nil {
		return nil, err
	}
	defer zd.Close()
	// read reads the queue with coding, decoding the body as it arrives, as a client would (the
	// standard library's gzip, klauspost's zstd); keep gets the decoded body.
	read := func(coding string, keep *bytes.Buffer) (int, error) {
		req := s.request(ctx, "GET", "/api/platform/events", t.Token, nil)
		req.Header.Set("Accept-Encoding", coding)
		r, err := s.http.Do(req)
		if err != nil {
			return 0, err
		}
		defer r.Body.Close()
		if r.StatusCode != 200 || (coding != "identity" && r.Header.Get("Content-Encoding") != coding) {
			return 0, fmt.Errorf("%s read: status %d, Content-Encoding %q", coding, r.StatusCode, r.Header.Get("Content-Encoding"))
		}
		wire := &countingReader{r: r.Body}
		var body io.Reader = wire
		switch coding {
		case "gzip":
			gz, err := gzip.NewReader(wire)
			if err != nil {
				return 0, err
			}
			body = gz
		case "zstd":
			if err := zd.Reset(wire); err != nil {
				return 0, err
			}
			body = zd
		}
		var out io.Writer = io.Discard
		if keep != nil {
			out = keep
		}
		_, err = io.Copy(out, body)
		return wire.n, err
	}
	var identity []byte
	for _, coding := range codings { // warm-up, and the check that each decodes to the identity body
		var plain bytes.Buffer
		wire, err := read(coding, &plain)
		if err != nil {
			return nil, err
		}
		if identity == nil {
			identity = plain.Bytes()
		} else if !bytes.Equal(plain.Bytes(), identity) {
			return nil, fmt.Errorf("%s body does not decode to the identity body", coding)
		}
		res.Codings = append(res.Codings, CodingCost{Coding: coding, WireBytes: wire})
	}
	var floor []time.Duration
	lat := make([][]time.Duration, len(codings))
	cpu := make([]time.Duration, len(codings))
	for range iterations {
		start := time.Now()
		if n, err := raw.lrange(key, queueEvents-1); err != nil || n != queueEvents {
			return nil, fmt.Errorf("raw LRANGE: %d events, %v", n, err)
		}
		floor = append(floor, time.Since(start))
		for i, coding := range codings {
			before := cpuTime(s.api.pid())
			start := time.Now()
			if _, err := read(coding, nil); err != nil {
				return nil, err
			}
			lat[i] = append(lat[i], time.Since(start))
			cpu[i] += cpuTime(s.api.pid()) - before
		}
	}
	res.Floor = summarize(floor)
	for i := range res.Codings {
		c := &res.Codings[i]
		c.Client = summarize(lat[i])
		c.APICPUMsPage = ms(cpu[i]) / float64(iterations)
		c.Ratio = c.Client.P50 / res.Floor.P50
	}
	for i := range res.Codings {
		c := &res.Codings[i]
		if c.Coding == "identity" {
			continue
		}
		codec, err := fastestCodec(c.Coding, identity)
		if err != nil {
			return nil, err
		}
		c.CodecMs = ms(codec)
		c.Bound = res.Codings[0].Client.P50 + c.CodecMs
		c.BoundRatio = c.Client.P50 / c.Bound
	}
	return res, nil
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// benchRebuild runs scenario 9 on the running services' database: n stored, queued events of
// a new tenant, a queue Redis lost, and a rebuild.
func benchRebuild(ctx context.Context, s *stack, database string, n int) (*Rebuild, error) {
	t, err := s.seedTenant(ctx, "", true)
	if err != nil {
		return nil, err
	}
	rows := make([]models.TrackedEvent, 0, 1000)
	base := time.Now().UTC().Add(-time.Hour)
	for i := 0; i < n; i += len(rows) {
		rows = rows[:0]
		for j := i; j < min(i+1000, n); j++ {
			r := models.TrackedEvent{ID: uuid.Must(uuid.NewV7()).String(), TenantID: t.ID, Type: "page_view",
				SessionID: fmt.Sprintf("s-%d", j/7), URL: "https://shop.example/p/1?ref=mail", PageHostname: "shop.example",
				PagePath: "/p/1", UserAgent: queueUserAgent, IPAddress: "203.0.113.7", EventSequence: int64(j % 7),
				Queued: true, CreatedAt: base.Add(time.Duration(j) * time.Millisecond)}
			rows = append(rows, r)
		}
		if err := s.db.WithContext(ctx).CreateInBatches(rows, 250).Error; err != nil {
			return nil, fmt.Errorf("rebuild: seed events: %w", err)
		}
	}
	store := eventqueue.New(s.rdb)
	defer store.Close()
	in := tracking.NewIngestor(s.db, features.New(s.db, clock.Real{}), store, clock.Real{}, slog.New(slog.DiscardHandler), metrics.New())
	defer in.Close()
	start := time.Now()
	restored, err := (&consume.Service{DB: s.db, Events: in.Events(), Queue: store, Held: in.Delivery()}).Rebuild(ctx, t.ID)
	took := time.Since(start)
	if err != nil {
		return nil, err
	}
	if got := s.rdb.LLen(ctx, eventqueue.Key(t.ID)).Val(); restored[t.ID] != int64(n) || got != int64(n) {
		return nil, fmt.Errorf("rebuild: restored %d, queue holds %d, want %d", restored[t.ID], got, n)
	}
	s.rdb.Del(ctx, eventqueue.Key(t.ID))
	return &Rebuild{Database: database, Events: n, Seconds: took.Seconds(), SettleSeconds: consume.RebuildSettle.Seconds(),
		EventsPerSec: float64(n) / took.Seconds()}, nil
}
