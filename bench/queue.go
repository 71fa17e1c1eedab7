package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/eventq/eventq/internal/eventqueue"
	"github.com/eventq/eventq/models"
)

// queueEvents is how many events each benchmarked queue holds: one full read.
const queueEvents = eventqueue.MaxRead

// eventSize is the size in bytes of each queued event's JSON.
const eventSize = 380

// queueUserAgent is the user agent of the queued events: a short one, so that the URL can be
// padded to make each event exactly eventSize bytes.
const queueUserAgent = "Mozilla/5.0 (X11; Linux x86_64) Firefox/124.0"

// QueueRead is scenario 1: one consumer reading a full queue, sequentially, interleaved with
// the floor (the same LRANGE straight to Redis).
type QueueRead struct {
	Events      int     `json:"events"`
	EventBytes  int     `json:"event_bytes"`
	BodyBytes   int     `json:"body_bytes"`
	Iterations  int     `json:"iterations"`
	API         Latency `json:"api"`
	GoRedis     Latency `json:"floor_go_redis"`
	RawRESP     Latency `json:"floor_raw_resp"`
	FloorSource string  `json:"floor_source"` // the faster of the two by median: "go-redis" or "raw RESP"
	Floor       Latency `json:"floor"`
	Ratio       float64 `json:"ratio_median"` // API median / floor median
	RatioP99    float64 `json:"ratio_p99"`
	// StaticHTTP is GET /bench/page of the same size from the same api and client: the read's
	// second leg alone. A read that takes the page from Redis and then sends it cannot beat
	// Floor + StaticHTTP (SequentialMs); only overlapping the two legs could.
	StaticHTTP Latency `json:"static_http"`
	// AtomicRESP is the same LRANGE with the offset in one MULTI/EXEC over raw RESP: Redis
	// then builds the whole reply before sending any of it. It is the Redis leg of a read
	// that would stream the events as they arrive, which needs the offset checked first.
	AtomicRESP      Latency `json:"atomic_raw_resp"`
	SequentialMs    float64 `json:"sequential_floor_median_ms"`
	RatioSequential float64 `json:"ratio_sequential"`
	// CPU per read of every process taking part (the api, Redis, this client), in ms, from
	// back-to-back runs of each kind: the api read, the raw LRANGE, and the same bytes from
	// memory over HTTP. On a machine of Cores cores no overlap of the legs can make a read
	// faster than its CPU ÷ Cores (CoreBoundMs).
	CPU         ReadCPU `json:"cpu_per_read_ms"`
	FloorCPU    ReadCPU `json:"floor_cpu_per_read_ms"`
	StaticCPU   ReadCPU `json:"static_http_cpu_per_read_ms"`
	Cores       int     `json:"cores"`
	CoreBoundMs float64 `json:"core_bound_ms"`
	// FirstByte is how long the raw LRANGE waits for the first byte of Redis's reply: Redis
	// builds the whole reply before it sends any, and until then there is nothing to forward.
	// A read can therefore take no less than that wait plus the rest of its CPU spread over
	// the cores (FirstByteBoundMs), counting the wait as Redis's CPU alone.
	FirstByte        Latency `json:"raw_resp_first_byte"`
	FirstByteBoundMs float64 `json:"first_byte_bound_ms"`
	Target           float64 `json:"target_ratio_max"`
	Met              bool    `json:"met"`
}

// QueueReadConcurrent is scenario 1b: Readers consumers, each reading its own tenant's full
// queue in a loop (closed loop: a consumer reads again as soon as its read returns), beside
// the same number of go-redis LRANGE loops.
type QueueReadConcurrent struct {
	Readers         int     `json:"readers"`
	DurationSeconds float64 `json:"duration_seconds"`
	API             Latency `json:"api"`
	APIReadsPerSec  float64 `json:"api_reads_per_second"`
	APIEventsPerSec float64 `json:"api_events_per_second"`
	APIErrors       int     `json:"api_errors"`
	Floor           Latency `json:"floor_go_redis"`
	FloorReadsPerS  float64 `json:"floor_reads_per_second"`
	Ratio           float64 `json:"ratio_throughput"` // floor reads/s ÷ API reads/s
	APIPeakRSSMiB   float64 `json:"api_peak_rss_mib"` // VmHWM of the api process after the readers
}

// Trim is scenario 2: DELETE ?count=10000 on a full queue (refilled before each), beside
// LTRIM key 10000 -1 straight to Redis.
type Trim struct {
	Iterations int     `json:"iterations"`
	API        Latency `json:"api"`
	Floor      Latency `json:"floor_ltrim"`
	Ratio      float64 `json:"ratio_median"`
}

// queuePayloads builds n distinct, realistic queue events of exactly eventSize bytes for
// tenantID, as the service itself would store them.
func queuePayloads(tenantID uint64, n int) []any {
	out := make([]any, n)
	now := time.Now().UTC()
	for i := range n {
		member := strconv.Itoa(1000 + i%97)
		e := models.TrackedEvent{
			ID: uuid.Must(uuid.NewV7()).String(), TenantID: tenantID, Type: "page_view",
			SessionID: fmt.Sprintf("s-%08x", i/7), URL: fmt.Sprintf("https://shop.example/p/%d?ref=mail", i%500),
			PageHostname: "shop.example", PagePath: fmt.Sprintf("/p/%d", i%500),
			UserAgent: queueUserAgent, IPAddress: "203.0.113.7", EventSequence: int64(i % 7), CreatedAt: now,
		}
		if i%3 == 0 {
			e.AudienceMemberID = &member
		}
		if pad := eventSize - len(e.MarshalQueue()) - len("&c="); pad >= 0 {
			e.URL += "&c=" + strings.Repeat("x", pad)
		}
		out[i] = e.MarshalQueue()
	}
	return out
}

// fillQueue replaces tenantID's queue with payloads.
func fillQueue(ctx context.Context, rdb *redis.Client, tenantID uint64, payloads []any) error {
	key := eventqueue.Key(tenantID)
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, key)
		for i := 0; i < len(payloads); i += 1000 {
			p.RPush(ctx, key, payloads[i:min(i+1000, len(payloads))]...)
		}
		return nil
	})
	return err
}

// readAPI reads tenant's queue through the api into buf and returns the body size.
func (s *stack) readAPI(ctx context.Context, token string, buf *bytes.Buffer) (int, error) {
	return s.readPath(ctx, "/api/platform/events", token, buf)
}

// readPath GETs path with token ("" for none) into buf and returns the body's size.
func (s *stack) readPath(ctx context.Context, path, token string, buf *bytes.Buffer) (int, error) {
	return s.readURL(ctx, s.base, path, token, buf)
}

// readURL is readPath from the api at base.
func (s *stack) readURL(ctx context.Context, base, path, token string, buf *bytes.Buffer) (int, error) {
	res, err := s.http.Do(s.requestTo(ctx, base, "GET", path, token, nil))
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	buf.Reset()
	if _, err := buf.ReadFrom(res.Body); err != nil {
		return 0, err
	}
	if res.StatusCode != 200 {
		return 0, fmt.Errorf("GET %s: status %d", path, res.StatusCode)
	}
	return buf.Len(), nil
}

// benchQueueRead runs scenario 1 on tenant t, whose queue is full.
func benchQueueRead(ctx context.Context, s *stack, t *tenant, iterations int) (*QueueRead, error) {
	key := eventqueue.Key(t.ID)
	raw, err := dialRESP(s.rdb.Options().Addr)
	if err != nil {
		return nil, err
	}
	defer raw.close()
	var body bytes.Buffer
	res := &QueueRead{Events: queueEvents, Iterations: iterations, Target: 1.2}

	// Check once that the api answers the whole queue, then warm up both sides.
	size, err := s.readAPI(ctx, t.Token, &body)
	if err != nil {
		return nil, err
	}
	var page struct {
		Data struct {
			Count  int               `json:"count"`
			Events []json.RawMessage `json:"events"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body.Bytes(), &page); err != nil || page.Data.Count != queueEvents || len(page.Data.Events) != queueEvents {
		return nil, fmt.Errorf("queue read: the api answered %d events (%v), want %d", page.Data.Count, err, queueEvents)
	}
	res.BodyBytes, res.EventBytes = size, len(page.Data.Events[0])
	for range 5 {
		s.readAPI(ctx, t.Token, &body)
		s.rdb.LRange(ctx, key, 0, queueEvents-1)
		raw.lrange(key, queueEvents-1)
	}

	static := fmt.Sprintf("/bench/page?bytes=%d", size)
	for range 5 {
		s.readPath(ctx, static, "", &body)
	}
	offsetKey := eventqueue.OffsetKey(t.ID)
	var api, gr, rr, rf, st, ar []time.Duration
	for i := 0; i < iterations; i++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		start := time.Now()
		n, first, err := raw.lrangeTimed(key, queueEvents-1)
		if err != nil || n != queueEvents {
			return nil, fmt.Errorf("raw LRANGE: %d events, %v", n, err)
		}
		rr, rf = append(rr, time.Since(start)), append(rf, first)

		start = time.Now()
		if _, err := s.readAPI(ctx, t.Token, &body); err != nil {
			return nil, err
		}
		api = append(api, time.Since(start))

		start = time.Now()
		if v, err := s.rdb.LRange(ctx, key, 0, queueEvents-1).Result(); err != nil || len(v) != queueEvents {
			return nil, fmt.Errorf("go-redis LRANGE: %d events, %v", len(v), err)
		}
		gr = append(gr, time.Since(start))

		start = time.Now()
		if n, err := s.readPath(ctx, static, "", &body); err != nil || n != size {
			return nil, fmt.Errorf("GET %s: %d bytes, %v", static, n, err)
		}
		st = append(st, time.Since(start))

		start = time.Now()
		if n, err := raw.multiLRange(key, offsetKey, queueEvents-1); err != nil || n != queueEvents {
			return nil, fmt.Errorf("raw MULTI LRANGE: %d events, %v", n, err)
		}
		ar = append(ar, time.Since(start))
	}
	res.API, res.GoRedis, res.RawRESP, res.StaticHTTP, res.AtomicRESP = summarize(api), summarize(gr), summarize(rr), summarize(st), summarize(ar)
	res.FirstByte = summarize(rf)
	res.FloorSource, res.Floor = "go-redis", res.GoRedis
	if res.RawRESP.P50 < res.GoRedis.P50 {
		res.FloorSource, res.Floor = "raw RESP", res.RawRESP
	}
	res.Ratio = res.API.P50 / res.Floor.P50
	res.RatioP99 = res.API.P99 / res.Floor.P99
	res.SequentialMs = res.Floor.P50 + res.StaticHTTP.P50
	res.RatioSequential = res.API.P50 / res.SequentialMs
	res.Met = res.Ratio <= res.Target

	n := max(20, iterations)
	res.CPU = readCPU(ctx, s, n, func() { s.readAPI(ctx, t.Token, &body) })
	res.FloorCPU = readCPU(ctx, s, n, func() { raw.lrange(key, queueEvents-1) })
	res.StaticCPU = readCPU(ctx, s, n, func() { s.readPath(ctx, static, "", &body) })
	res.Cores = runtime.NumCPU()
	res.CoreBoundMs = res.CPU.Total / float64(res.Cores)
	res.FirstByteBoundMs = res.FirstByte.P50 + max(0, res.CPU.Total-res.FirstByte.P50)/float64(res.Cores)
	return res, ctx.Err()
}

// ReadCPU is the CPU time of one read, in ms, by process.
type ReadCPU struct {
	API    float64 `json:"api"`
	Redis  float64 `json:"redis"`
	Client float64 `json:"client"`
	Total  float64 `json:"total"`
}

// readCPU runs read n times back to back and returns the CPU each took, per process: the api
// and this process from their threads' scheduler statistics (nanoseconds), Redis from INFO.
func readCPU(ctx context.Context, s *stack, n int, read func()) ReadCPU {
	api0, self0 := threadsCPUSeconds(s.api.pid()), threadsCPUSeconds(os.Getpid())
	_, redis0 := redisCounters(ctx, s)
	for range n {
		read()
	}
	_, redis1 := redisCounters(ctx, s)
	api1, self1 := threadsCPUSeconds(s.api.pid()), threadsCPUSeconds(os.Getpid())
	ms := func(d float64) float64 { return d / float64(n) * 1e3 }
	c := ReadCPU{API: ms(api1 - api0), Redis: ms(redis1 - redis0), Client: ms(self1 - self0)}
	c.Total = c.API + c.Redis + c.Client
	return c
}

// threadsCPUSeconds is the time the threads of process pid have run, from each thread's
// /proc schedstat (nanoseconds, unlike /proc/PID/stat's 10 ms ticks), 0 if unknown.
func threadsCPUSeconds(pid int) float64 {
	paths, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	var ns float64
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		f := strings.Fields(string(b))
		if len(f) > 0 {
			v, _ := strconv.ParseFloat(f[0], 64)
			ns += v
		}
	}
	return ns / 1e9
}

// benchQueueReadConcurrent runs scenario 1b: one closed-loop reader per tenant for d.
func benchQueueReadConcurrent(ctx context.Context, s *stack, tenants []*tenant, d time.Duration) (*QueueReadConcurrent, error) {
	res := &QueueReadConcurrent{Readers: len(tenants), DurationSeconds: d.Seconds()}

	// The floor first: the same readers straight to Redis.
	floorLat, floorN, _, err := closedLoop(ctx, len(tenants), d, func(ctx context.Context, i int, _ *bytes.Buffer) error {
		v, err := s.rdb.LRange(ctx, eventqueue.Key(tenants[i].ID), 0, queueEvents-1).Result()
		if err == nil && len(v) != queueEvents {
			err = fmt.Errorf("LRANGE: %d events", len(v))
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	res.Floor, res.FloorReadsPerS = summarize(floorLat), float64(floorN)/d.Seconds()

	apiLat, apiN, apiErrs, err := closedLoop(ctx, len(tenants), d, func(ctx context.Context, i int, buf *bytes.Buffer) error {
		_, err := s.readAPI(ctx, tenants[i].Token, buf)
		return err
	})
	if err != nil {
		return nil, err
	}
	res.API, res.APIErrors = summarize(apiLat), apiErrs
	res.APIReadsPerSec = float64(apiN) / d.Seconds()
	res.APIEventsPerSec = res.APIReadsPerSec * queueEvents
	if res.APIReadsPerSec > 0 {
		res.Ratio = res.FloorReadsPerS / res.APIReadsPerSec
	}
	res.APIPeakRSSMiB = peakRSS(s.api.pid())
	return res, nil
}

// closedLoop runs workers goroutines, each calling do(worker) back to back for d, and returns
// the latencies of the successful calls, their count and the failures. Calls still running at
// the deadline finish and count.
func closedLoop(ctx context.Context, workers int, d time.Duration, do func(context.Context, int, *bytes.Buffer) error) ([]time.Duration, int, int, error) {
	var (
		mu     sync.Mutex
		lat    []time.Duration
		failed int
		wg     sync.WaitGroup
	)
	deadline := time.Now().Add(d)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var buf bytes.Buffer
			for time.Now().Before(deadline) && ctx.Err() == nil {
				start := time.Now()
				err := do(ctx, w, &buf)
				took := time.Since(start)
				mu.Lock()
				if err != nil {
					failed++
				} else {
					lat = append(lat, took)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return lat, len(lat), failed, ctx.Err()
}

// benchTrim runs scenario 2 on tenant t: each iteration refills the queue, then trims it,
// alternately through the api and straight to Redis.
func benchTrim(ctx context.Context, s *stack, t *tenant, payloads []any, iterations int) (*Trim, error) {
	key := eventqueue.Key(t.ID)
	var api, floor []time.Duration
	for i := 0; i < iterations+2; i++ { // the first two are warm-up
		if err := fillQueue(ctx, s.rdb, t.ID, payloads); err != nil {
			return nil, err
		}
		start := time.Now()
		err := expect(s.http, s.request(ctx, "DELETE", fmt.Sprintf("/api/platform/events?count=%d", queueEvents), t.Token, nil), 204)
		took := time.Since(start)
		if err != nil {
			return nil, fmt.Errorf("DELETE /api/platform/events: %w", err)
		}
		if n := s.rdb.LLen(ctx, key).Val(); n != 0 {
			return nil, fmt.Errorf("trim left %d events", n)
		}
		if i >= 2 {
			api = append(api, took)
		}

		if err := fillQueue(ctx, s.rdb, t.ID, payloads); err != nil {
			return nil, err
		}
		start = time.Now()
		if err := s.rdb.LTrim(ctx, key, queueEvents, -1).Err(); err != nil {
			return nil, err
		}
		if i >= 2 {
			floor = append(floor, time.Since(start))
		}
	}
	res := &Trim{Iterations: iterations, API: summarize(api), Floor: summarize(floor)}
	res.Ratio = res.API.P50 / res.Floor.P50
	return res, nil
}
