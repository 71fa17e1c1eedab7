package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"
)

// newHTTPClient returns the load generator's client: keep-alive, a large idle pool per host
// (the server is one host), no compression, no proxy; loopback only.
func newHTTPClient() *http.Client {
	return &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{
			Proxy:               nil,
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:        4096,
			MaxIdleConnsPerHost: 4096,
			IdleConnTimeout:     90 * time.Second,
			DisableCompression:  true,
			ForceAttemptHTTP2:   false,
		},
	}
}

// openLoop is one open-loop run: request i is due at start + i/Rate whatever happened to the
// requests before it, each runs in its own goroutine, and its latency is measured from the
// time it was due, so time spent queueing (in the generator or the server) counts.
type openLoop struct {
	Rate        float64       // requests per second
	N           int           // requests to send
	MaxDuration time.Duration // stop sending after this long even if N is not reached (0: no limit)
	MaxInFlight int           // requests beyond this many outstanding are dropped and counted
	// Do sends request i and returns nil when the answer is the expected one.
	Do func(ctx context.Context, i int) error
}

// loadResult is what an open-loop run measured.
type loadResult struct {
	Offered  float64         // requests/s asked for
	Due      int             // requests that came due
	OK       int             // expected answers
	Failed   int             // errors and unexpected statuses
	Dropped  int             // not sent: MaxInFlight outstanding already
	FirstErr string          // the first failure, for the log
	Lat      []time.Duration // per OK request, from its due time to its answer
	DueAt    []time.Duration // per OK request, its due time after the start
	Achieved float64         // OK answers per second, measured over the span of the answers
	Span     time.Duration   // start to last answer
}

func (o openLoop) run(ctx context.Context) loadResult {
	if o.MaxInFlight <= 0 {
		o.MaxInFlight = 1024
	}
	var (
		wg    sync.WaitGroup
		sem   = make(chan struct{}, o.MaxInFlight)
		due   = make([]time.Time, o.N)
		done  = make([]time.Time, o.N)
		errs  = make([]error, o.N)
		sent  = make([]bool, o.N)
		start = time.Now()
		res   = loadResult{Offered: o.Rate}
	)
	interval := float64(time.Second) / o.Rate
send:
	for i := 0; i < o.N; i++ {
		at := start.Add(time.Duration(float64(i) * interval))
		if o.MaxDuration > 0 && at.Sub(start) >= o.MaxDuration {
			break
		}
		if d := time.Until(at); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-ctx.Done():
				t.Stop()
				break send
			case <-t.C:
			}
		} else if ctx.Err() != nil {
			break
		}
		res.Due++
		select {
		case sem <- struct{}{}:
		default:
			res.Dropped++
			continue
		}
		due[i], sent[i] = at, true
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			errs[i] = o.Do(ctx, i)
			done[i] = time.Now()
			<-sem
		}(i)
	}
	wg.Wait()

	var first, last time.Time
	for i := range o.N {
		if !sent[i] {
			continue
		}
		if errs[i] != nil {
			res.Failed++
			if res.FirstErr == "" {
				res.FirstErr = errs[i].Error()
			}
			continue
		}
		res.OK++
		res.Lat = append(res.Lat, done[i].Sub(due[i]))
		res.DueAt = append(res.DueAt, due[i].Sub(start))
		if first.IsZero() || done[i].Before(first) {
			first = done[i]
		}
		if done[i].After(last) {
			last = done[i]
		}
	}
	if !last.IsZero() {
		res.Span = last.Sub(start)
	}
	// The rate of answers between the first and the last: equal to the offered rate while the
	// server keeps up, its service rate when it does not.
	if res.OK > 1 && last.After(first) {
		res.Achieved = float64(res.OK-1) / last.Sub(first).Seconds()
	}
	return res
}

// p99BySecond returns the p99 in ms of the requests due in each second of the run.
func (r loadResult) p99BySecond() []float64 {
	var buckets [][]time.Duration
	for i, at := range r.DueAt {
		sec := int(at / time.Second)
		for len(buckets) <= sec {
			buckets = append(buckets, nil)
		}
		buckets[sec] = append(buckets[sec], r.Lat[i])
	}
	out := make([]float64, len(buckets))
	for i, b := range buckets {
		out[i] = summarize(b).P99
	}
	return out
}

// backlogGrowth is how much a run's median latency may grow from its first quarter to its last
// (by the requests' due times) and still count as steady: both more than double and 20 ms more
// mean requests queue faster than they are answered. Offered above the service rate, the wait
// grows by (1 - service/offered) of the elapsed time, so a step of 3.4 s at 5% over capacity
// ends about 160 ms behind: within the search's 500 ms p99, yet not sustainable for longer.
const backlogGrowth = 20 * time.Millisecond

// backlog compares the median latency of the requests due in the first and in the last quarter
// of the run and reports whether it grew as a backlog does (backlogGrowth).
func (r loadResult) backlog() (early, late float64, growing bool) {
	if len(r.DueAt) < 8 {
		return 0, 0, false
	}
	end := slices.Max(r.DueAt)
	var first, last []time.Duration
	for i, at := range r.DueAt {
		switch {
		case at < end/4:
			first = append(first, r.Lat[i])
		case at >= end-end/4:
			last = append(last, r.Lat[i])
		}
	}
	if len(first) == 0 || len(last) == 0 {
		return 0, 0, false
	}
	early, late = summarize(first).P50, summarize(last).P50
	return early, late, late > 2*early && late-early > ms(backlogGrowth)
}

// Latency summarises durations in milliseconds.
type Latency struct {
	N    int     `json:"n"`
	P50  float64 `json:"p50_ms"`
	P99  float64 `json:"p99_ms"`
	Max  float64 `json:"max_ms"`
	Mean float64 `json:"mean_ms"`
}

// summarize returns the quantiles of ds (nearest rank). It sorts a copy: ds keeps its order,
// which loadResult.DueAt pairs with.
func summarize(ds []time.Duration) Latency {
	if len(ds) == 0 {
		return Latency{}
	}
	ds = slices.Sorted(slices.Values(ds))
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	q := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(ds)))) - 1
		return ms(ds[max(0, min(i, len(ds)-1))])
	}
	return Latency{N: len(ds), P50: q(0.50), P99: q(0.99), Max: ms(ds[len(ds)-1]), Mean: ms(sum / time.Duration(len(ds)))}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// expect sends req with c, reads and discards the answer's body, and fails unless its status
// is want.
func expect(c *http.Client, req *http.Request, want int) error {
	res, err := c.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if _, err := io.Copy(io.Discard, res.Body); err != nil {
		return err
	}
	if res.StatusCode != want {
		return fmt.Errorf("status %d, want %d", res.StatusCode, want)
	}
	return nil
}

// sleepCtx sleeps for d or until ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
