package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
)

// Report is everything one run measured; it is written as JSON to -out.
type Report struct {
	Command         string               `json:"command"`
	Quick           bool                 `json:"quick"`
	Machine         Machine              `json:"machine"`
	DurationSeconds float64              `json:"duration_seconds"`
	QueueRead       *QueueRead           `json:"queue_read"`
	QueueReadConc   *QueueReadConcurrent `json:"queue_read_concurrent"`
	Trim            *Trim                `json:"trim"`
	Ingest          []*Ingest            `json:"ingest"`
	Webhook         *Webhook             `json:"webhook"`
	Fulfilment      *Fulfilment          `json:"fulfilment"`
	Limits          *LimitsCost          `json:"rate_limits"`
	LongPoll        *LongPoll            `json:"long_poll"`
	Compression     *Compression         `json:"compression"`
	Rebuild         []*Rebuild           `json:"rebuild"`
	Retention       *Retention           `json:"retention"`
	Leases          *Leases              `json:"leases"`
	Checkpoint      *CheckpointTail      `json:"checkpoint"`
	Outage          *Outage              `json:"outage"`
	Bombs           *Bombs               `json:"bombs"`
	FrontDoor       *FrontDoor           `json:"front_door"`
	Erasure         []*Erasure           `json:"erasure"`
	Citus           *Citus               `json:"citus,omitempty"`
	Minimise        []*Minimise          `json:"minimisation"`
	Memory          []*MemoryPeak        `json:"memory"`
	Rows            []Row                `json:"table"`
}

// Machine describes where the run happened.
type Machine struct {
	Date            string `json:"date"`
	NumCPU          int    `json:"nproc"`
	CPUModel        string `json:"cpu_model"`
	MemoryMiB       int    `json:"memory_mib"`
	Kernel          string `json:"kernel"`
	GoVersion       string `json:"go_version"`
	RedisVersion    string `json:"redis_version"`
	PostgresVersion string `json:"postgres_version"`
	Revision        string `json:"git_revision"`
	LoadAvgStart    string `json:"loadavg_start"` // /proc/loadavg: other work on the machine skews the figures
	LoadAvgEnd      string `json:"loadavg_end"`
}

func loadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	return strings.TrimSpace(string(b))
}

// Row is one line of the printed table. Floor, Ratio and Met are absent when the figure has
// none.
type Row struct {
	Scenario string   `json:"scenario"`
	Metric   string   `json:"metric"`
	Value    float64  `json:"value"`
	Floor    *float64 `json:"floor"`
	Ratio    *float64 `json:"ratio"`
	Target   string   `json:"target"`
	Met      *bool    `json:"met"`
	// MetLastRun is whether the last full run met the same target (a full run only; see
	// runs.go).
	MetLastRun *bool `json:"met_last_run,omitempty"`
}

func describeMachine(ctx context.Context, s *stack) Machine {
	m := Machine{Date: time.Now().Format(time.RFC3339), NumCPU: runtime.NumCPU(), GoVersion: runtime.Version(), LoadAvgStart: loadAvg()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				kb, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
				m.MemoryMiB = kb / 1024
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = "Linux " + strings.TrimSpace(string(b))
	}
	if info, err := s.rdb.Info(ctx, "server").Result(); err == nil {
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
				m.RedisVersion = v
			}
		}
	}
	if c, err := pgx.Connect(ctx, s.pg.URL("postgres")); err == nil {
		c.QueryRow(ctx, "SHOW server_version").Scan(&m.PostgresVersion)
		c.Close(ctx)
	}
	if root, err := moduleRoot(); err == nil {
		if out, err := exec.Command("git", "-C", root, "describe", "--always", "--dirty").Output(); err == nil {
			m.Revision = strings.TrimSpace(string(out))
		}
	}
	return m
}

// buildRows turns the report's figures into the table.
func (r *Report) buildRows() {
	var rows []Row
	add := func(scenario, metric string, value float64, floor, ratio *float64, target string, met *bool) {
		rows = append(rows, Row{Scenario: scenario, Metric: metric, Value: value, Floor: finite(floor), Ratio: finite(ratio), Target: target, Met: met})
	}
	f := func(v float64) *float64 { return &v }
	b := func(v bool) *bool { return &v }
	if q := r.QueueRead; q != nil {
		name := fmt.Sprintf("queue read (%dk × %d B)", q.Events/1000, q.EventBytes)
		add(name, "median ms (floor: "+q.FloorSource+")", q.API.P50, f(q.Floor.P50), f(q.Ratio), fmt.Sprintf("≤ %.1f×", q.Target), b(q.Met))
		add(name, "p99 ms", q.API.P99, f(q.Floor.P99), f(q.RatioP99), "", nil)
		add(name, "floor go-redis / raw RESP median ms", q.GoRedis.P50, f(q.RawRESP.P50), nil, "", nil)
		add(name, "same bytes from memory over HTTP, median ms (beside: floor)", q.StaticHTTP.P50, f(q.Floor.P50), nil, "", nil)
		add(name, "median ms (beside: floor + the same bytes over HTTP)", q.API.P50, f(q.SequentialMs), f(q.RatioSequential), "", nil)
		add(name, "floor as one MULTI with the offset, median ms (beside: floor)", q.AtomicRESP.P50, f(q.Floor.P50), f(q.AtomicRESP.P50/q.Floor.P50), "", nil)
		if q.CPU.Total > 0 {
			add(name, "CPU ms per read, api + Redis + client (beside: raw LRANGE's)", q.CPU.Total, f(q.FloorCPU.Total), f(q.CPU.Total/q.FloorCPU.Total), "", nil)
			add(name, "api CPU ms per read (beside: Redis's)", q.CPU.API, f(q.CPU.Redis), nil, "", nil)
			add(name, "client CPU ms per read (beside: the raw LRANGE client's)", q.CPU.Client, f(q.FloorCPU.Client), nil, "", nil)
			add(name, "same bytes over HTTP, CPU ms of all processes (beside: raw LRANGE's)", q.StaticCPU.Total, f(q.FloorCPU.Total), nil, "", nil)
			add(name, fmt.Sprintf("fastest any read of that CPU can be on %d cores, ms (floor: raw RESP median)", q.Cores), q.CoreBoundMs, f(q.Floor.P50), f(q.CoreBoundMs/q.Floor.P50), "", nil)
			add(name, "raw LRANGE's first byte, median ms (beside: its whole reply)", q.FirstByte.P50, f(q.RawRESP.P50), f(q.FirstByte.P50/q.RawRESP.P50), "", nil)
			add(name, fmt.Sprintf("fastest that CPU can be after the first byte, on %d cores, ms (floor: raw RESP median)", q.Cores), q.FirstByteBoundMs, f(q.Floor.P50), f(q.FirstByteBoundMs/q.Floor.P50), "", nil)
		}
	}
	if q := r.QueueReadConc; q != nil {
		name := fmt.Sprintf("queue read, %d readers", q.Readers)
		add(name, "p50 ms", q.API.P50, f(q.Floor.P50), f(q.API.P50/q.Floor.P50), "", nil)
		add(name, "p99 ms", q.API.P99, f(q.Floor.P99), f(q.API.P99/q.Floor.P99), "", nil)
		add(name, "reads/s", q.APIReadsPerSec, f(q.FloorReadsPerS), f(q.APIReadsPerSec/q.FloorReadsPerS), "", nil)
		add(name, "api peak RSS MiB", q.APIPeakRSSMiB, nil, nil, "", nil)
	}
	if t := r.Trim; t != nil {
		add("trim 10k", "median ms (floor: LTRIM)", t.API.P50, f(t.Floor.P50), f(t.Ratio), "", nil)
		add("trim 10k", "p99 ms", t.API.P99, f(t.Floor.P99), f(t.API.P99/t.Floor.P99), "", nil)
	}
	for _, in := range r.Ingest {
		in.rows(add)
		if in.EventsPerRequest == 1 && in.Floor.Rows1 > 0 {
			add(fmt.Sprintf("insert floor %s", in.Database), fmt.Sprintf("1-row inserts rows/s (%d conn)", in.Floor.Conns), in.Floor.Rows1, nil, nil, "", nil)
			add(fmt.Sprintf("insert floor %s", in.Database), fmt.Sprintf("50-row inserts rows/s (%d conn)", in.Floor.Conns), in.Floor.Rows50, nil, nil, "", nil)
			add(fmt.Sprintf("insert floor %s", in.Database), fmt.Sprintf("100-row inserts rows/s (%d conn)", in.Floor.Conns), in.Floor.Rows100, nil, nil, "", nil)
		}
	}
	citusRows(r, add)
	if w := r.Webhook; w != nil {
		name := fmt.Sprintf("webhook %.0f/s × %.0fs", w.RatePerSec, w.DurationSeconds)
		add(name, "p99 ms (floor: GET /healthz)", w.API.P99, f(w.Floor.P99), f(w.Ratio), "≤ 5 ms", b(w.API.P99 <= w.TargetP99))
		add(name, "p50 ms", w.API.P50, f(w.Floor.P50), f(w.API.P50/w.Floor.P50), "", nil)
		add(name, "max ms", w.API.Max, f(w.Floor.Max), nil, "", nil)
		add(name, "non-200", float64(w.Non200+w.Dropped), nil, nil, "0", b(w.Non200+w.Dropped == 0))
		alone := fmt.Sprintf("webhook %.0f/s × %.0fs, worker stopped", w.RatePerSec, w.WorkerStoppedSeconds)
		add(alone, "p99 ms", w.WorkerStopped.P99, f(w.Floor.P99), f(w.WorkerStopped.P99/w.Floor.P99), "", nil)
		add(alone, "p50 ms", w.WorkerStopped.P50, f(w.Floor.P50), f(w.WorkerStopped.P50/w.Floor.P50), "", nil)
	}
	if fu := r.Fulfilment; fu != nil {
		name := fmt.Sprintf("fulfilment %d sessions", fu.Sessions)
		add(name, "purchases/s (floor: pg tx/s)", fu.PurchasesPerSec, f(fu.FloorTxPerSec), f(fu.Ratio), "≥ 300/s", b(fu.MetThroughput))
		add(name, "s until all committed", fu.ElapsedSeconds, nil, nil, "", nil)
		add(name, "webhook→purchase p50 ms", fu.Latency.P50, nil, nil, "≤ 50 ms", b(fu.MetP50))
		add(name, "webhook→purchase p99 ms", fu.Latency.P99, nil, nil, "", nil)
		if lo := fu.BelowCapacity; lo != nil {
			low := fmt.Sprintf("fulfilment %.0f/s × %d", lo.RatePerSec, lo.Sessions)
			add(low, "webhook→purchase p50 ms", lo.Latency.P50, nil, nil, fmt.Sprintf("≤ %.0f ms", lo.TargetP50), b(lo.Latency.P50 <= lo.TargetP50))
			add(low, "webhook→purchase p99 ms", lo.Latency.P99, nil, nil, fmt.Sprintf("≤ %.0f ms", lo.TargetP99), b(lo.Latency.P99 <= lo.TargetP99))
			add(low, "purchases missing", float64(lo.Sessions-lo.Committed), nil, nil, "0", b(lo.Committed == lo.Sessions))
		}
		if c := fu.Capacity; c != nil {
			add(fmt.Sprintf("fulfilment capacity, %d backlog", c.Sessions), "purchases/s (first to last)", c.PurchasesPerSec, nil, nil,
				fmt.Sprintf("≥ %.0f/s", c.TargetPerSec), b(c.Met))
			add(fmt.Sprintf("fulfilment capacity, %d backlog", c.Sessions), "api / worker CPU ms per session", c.APICPUMsPerWebhook,
				f(c.WorkerCPUMsPerFulfilment), nil, "", nil)
			add(fmt.Sprintf("fulfilment capacity, %d backlog", c.Sessions), "postgres / redis CPU ms per session", c.PostgresCPUMsPerFulfilment,
				f(c.RedisCPUMsPerFulfilment), nil, "", nil)
			add(fmt.Sprintf("fulfilment capacity, %d backlog", c.Sessions), "machine CPU ms per session (beside: api's)", c.MachineCPUMsPerFulfilment,
				f(c.APIDrainCPUMsPerFulfilment), nil, "", nil)
		}
	}
	if l := r.Limits; l != nil {
		l.rows(add)
	}
	if l := r.LongPoll; l != nil {
		name := fmt.Sprintf("long poll, %d others waiting", l.Waiters)
		add(name, "track 202 → read answer p50 ms", l.Latency.P50, nil, nil, fmt.Sprintf("≤ %.0f ms", l.TargetP50), b(l.Latency.P50 <= l.TargetP50))
		add(name, "track 202 → read answer p99 ms", l.Latency.P99, nil, nil, fmt.Sprintf("≤ %.0f ms", l.TargetP99), b(l.Latency.P99 <= l.TargetP99))
		add(name, "api RSS MiB waiting (beside: idle)", l.RSSWaitingMiB, f(l.RSSIdleMiB), nil, "", nil)
	}
	if c := r.Compression; c != nil {
		var identity CodingCost
		for _, k := range c.Codings {
			if k.Coding == "identity" {
				identity = k
			}
		}
		for _, k := range c.Codings {
			name := fmt.Sprintf("read 10k, %s", k.Coding)
			add(name, "decoded median ms (floor: raw RESP)", k.Client.P50, f(c.Floor.P50), f(k.Ratio), "", nil)
			if k.Coding != "identity" {
				add(name, "decoded median ms (floor: identity read + fastest encode and decode)", k.Client.P50, f(k.Bound), f(k.BoundRatio),
					fmt.Sprintf("≤ %.1f×", c.Target), b(k.BoundRatio <= c.Target))
			}
			size := float64(k.WireBytes) / float64(identity.WireBytes)
			target, met := "", (*bool)(nil)
			if k.Coding != "identity" {
				target, met = fmt.Sprintf("≤ %.2f×", c.TargetSize), b(size <= c.TargetSize)
			}
			add(name, "bytes on the wire (beside: identity)", float64(k.WireBytes), f(float64(identity.WireBytes)), f(size), target, met)
			add(name, "api CPU ms per page (beside: identity)", k.APICPUMsPage, f(identity.APICPUMsPage), nil, "", nil)
		}
	}
	for _, rb := range r.Rebuild {
		name := fmt.Sprintf("rebuild %s, %dk events", rb.Database, rb.Events/1000)
		add(name, "events/s (incl. the fixed settle wait)", rb.EventsPerSec, nil, nil, "", nil)
		add(name, "seconds (beside: settle wait)", rb.Seconds, f(rb.SettleSeconds), nil, "", nil)
	}
	if rt := r.Retention; rt != nil {
		rt.rows(add)
	}
	if l := r.Leases; l != nil {
		l.rows(add)
	}
	if c := r.Checkpoint; c != nil {
		c.rows(add)
	}
	for _, m := range r.Memory {
		add("peak RSS per scenario (MiB)", m.Scenario+": api (beside: worker)", m.APIMiB, f(m.WorkerMiB), nil, "", nil)
	}
	if o := r.Outage; o != nil {
		o.rows(add)
	}
	if bo := r.Bombs; bo != nil {
		bo.rows(add)
	}
	if fd := r.FrontDoor; fd != nil {
		fd.rows(add)
	}
	for _, e := range r.Erasure {
		e.rows(add)
	}
	for _, m := range r.Minimise {
		m.rows(add)
	}
	r.Rows = rows
}

// printTable writes the table, aligned.
func (r *Report) printTable(w io.Writer, compared bool) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "scenario\tmetric\tvalue\tfloor\tratio\ttarget\tmet?")
	fmt.Fprintln(tw, "--------\t------\t-----\t-----\t-----\t------\t----")
	for _, row := range r.Rows {
		floor, ratio := "—", "—"
		if row.Floor != nil {
			floor = num(*row.Floor)
		}
		if row.Ratio != nil {
			ratio = fmt.Sprintf("%.2f×", *row.Ratio)
		}
		met := metColumn(row, compared)
		target := row.Target
		if target == "" {
			target = "—"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", row.Scenario, row.Metric, num(row.Value), floor, ratio, target, met)
	}
	tw.Flush()
}

// printTargets writes the rows that have a target as a Markdown table: value, floor, ratio,
// target, and whether two consecutive full runs met it.
func (r *Report) printTargets(w io.Writer, compared bool) {
	verdict := "met in this run"
	if compared {
		verdict = "met in two full runs"
	}
	fmt.Fprintf(w, "| scenario | metric | value | floor | ratio | target | %s |\n", verdict)
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---|---|")
	for _, row := range r.Rows {
		if row.Target == "" {
			continue
		}
		floor, ratio := "—", "—"
		if row.Floor != nil {
			floor = num(*row.Floor)
		}
		if row.Ratio != nil {
			ratio = fmt.Sprintf("%.2f×", *row.Ratio)
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s |\n", row.Scenario, row.Metric, num(row.Value), floor, ratio, row.Target, metColumn(row, compared))
	}
}

// num formats a figure with precision that suits its size.
func num(v float64) string {
	switch {
	case v >= 1000:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case v >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	default:
		return strconv.FormatFloat(v, 'f', 3, 64)
	}
}

// writeJSON writes the report to path, creating its directory.
func (r *Report) writeJSON(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// finite drops a figure that cannot be written as JSON: a ratio over a floor that measured zero
// (a quick run's no-op can use less CPU than /proc's 10 ms tick) is no figure at all.
func finite(v *float64) *float64 {
	if v == nil || math.IsInf(*v, 0) || math.IsNaN(*v) {
		return nil
	}
	return v
}
