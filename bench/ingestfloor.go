package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// FixedRate is one open-loop run at a fixed rate: its latency and the api's CPU.
type FixedRate struct {
	OfferedRequestsPerSec float64 `json:"offered_requests_per_second"`
	OK                    int     `json:"ok"`
	Failed                int     `json:"failed"`
	Dropped               int     `json:"dropped"`
	Latency               Latency `json:"latency"`
	// The p99 (ms) of the requests due in each second: a tail that is one stall shows as one
	// second, a queue that builds as several.
	P99BySecond        []float64 `json:"p99_ms_by_second"`
	APICPUSeconds      float64   `json:"api_cpu_seconds"`
	APICPUMicrosPerReq float64   `json:"api_cpu_us_per_request"`
	// Redis's commands and CPU (INFO) per answered request, the load generator and other
	// scenarios idle: what each request costs the Redis server beside the api.
	RedisCommandsPerReq  float64 `json:"redis_commands_per_request"`
	RedisCPUMicrosPerReq float64 `json:"redis_cpu_us_per_request"`
	// The whole machine's busy CPU time (/proc/stat) and the load generator's own (this
	// process) per answered request: with every server on the same cores, the highest rate
	// the machine can answer is its cores divided by the first.
	MachineCPUMicrosPerReq float64 `json:"machine_cpu_us_per_request"`
	LoadCPUMicrosPerReq    float64 `json:"load_generator_cpu_us_per_request"`
	// Postgres's CPU time (the postmaster and every process it started; on SQLite, which runs
	// inside the api, what the idle server spent) and the worker's, per answered request.
	PostgresCPUMicrosPerReq float64 `json:"postgres_cpu_us_per_request"`
	WorkerCPUMicrosPerReq   float64 `json:"worker_cpu_us_per_request"`
}

// machineBusySeconds is the CPU time all cores have spent busy so far (/proc/stat: every
// state but idle and iowait), 0 if unknown.
func machineBusySeconds() float64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return 0
	}
	var busy float64
	for i, v := range f[1:8] { // user nice system idle iowait irq softirq (steal and guest not counted)
		if i == 3 || i == 4 {
			continue
		}
		n, _ := strconv.ParseFloat(v, 64)
		busy += n
	}
	return busy / 100 // USER_HZ
}

// redisCounters reads Redis's total commands processed and CPU seconds used (INFO).
func redisCounters(ctx context.Context, s *stack) (commands, cpu float64) {
	info, err := s.rdb.Info(ctx, "stats", "cpu").Result()
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		f, _ := strconv.ParseFloat(v, 64)
		switch k {
		case "total_commands_processed":
			commands = f
		case "used_cpu_sys", "used_cpu_user":
			cpu += f
		}
	}
	return commands, cpu
}

// atFraction offers rate requests/s of post for twice plan.stepDur and measures the latency
// and the api's CPU time (user + system) per answered request. A second at the rate goes
// first, unmeasured: each scenario measures its arm, then the floor's, right after a
// capacity search that overloaded the api, and the arm measured first would otherwise pay
// alone for the api's recovery from it (its first second's p99 was up to ten times the next
// ones').
func atFraction(ctx context.Context, s *stack, label string, batch int, rate float64, plan ingestPlan, post func(context.Context, int) error) (*FixedRate, error) {
	warm := openLoop{Rate: rate, N: max(20, int(rate*warmUp.Seconds())), MaxInFlight: 1024, Do: post}.run(ctx)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	d := 2 * plan.stepDur
	cpu0 := procCPUSeconds(s.api.pid())
	cmds0, rcpu0 := redisCounters(ctx, s)
	pg0, worker0 := treeCPUSeconds(s.pg.PID()), procCPUSeconds(s.worker.pid())
	busy0, load0 := machineBusySeconds(), procCPUSeconds(os.Getpid())
	wait := s.profileDuring(ctx, fmt.Sprintf("%s-%d-%.0f", strings.ReplaceAll(label, " ", "-"), batch, rate), d)
	r := openLoop{Rate: rate, N: max(20, int(rate*d.Seconds())), MaxInFlight: 1024, Do: post}.run(ctx)
	wait()
	busy, load := machineBusySeconds()-busy0, procCPUSeconds(os.Getpid())-load0
	cpu := procCPUSeconds(s.api.pid()) - cpu0
	pg, worker := treeCPUSeconds(s.pg.PID())-pg0, procCPUSeconds(s.worker.pid())-worker0
	cmds1, rcpu1 := redisCounters(ctx, s)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	res := &FixedRate{OfferedRequestsPerSec: rate, OK: r.OK, Failed: r.Failed, Dropped: r.Dropped,
		Latency: summarize(r.Lat), P99BySecond: r.p99BySecond(), APICPUSeconds: cpu}
	if r.OK > 0 {
		res.APICPUMicrosPerReq = cpu / float64(r.OK) * 1e6
		res.RedisCommandsPerReq = (cmds1 - cmds0 - 2) / float64(r.OK) // less the two INFOs
		res.RedisCPUMicrosPerReq = (rcpu1 - rcpu0) / float64(r.OK) * 1e6
		res.MachineCPUMicrosPerReq = busy / float64(r.OK) * 1e6
		res.LoadCPUMicrosPerReq = load / float64(r.OK) * 1e6
		res.PostgresCPUMicrosPerReq = pg / float64(r.OK) * 1e6
		res.WorkerCPUMicrosPerReq = worker / float64(r.OK) * 1e6
	}
	s.logf("  %s %d/req at %.0f req/s (80%%): p50 %.1f ms, p99 %.1f ms (each second: %.0f; the unmeasured second before: %.0f), api CPU %.0f µs/request, Redis %.2f commands and %.0f µs CPU/request, %d failed, %d dropped",
		label, batch, rate, res.Latency.P50, res.Latency.P99, res.P99BySecond, summarize(warm.Lat).P99, res.APICPUMicrosPerReq, res.RedisCommandsPerReq, res.RedisCPUMicrosPerReq, r.Failed, r.Dropped)
	if err := sleepCtx(ctx, 300*time.Millisecond); err != nil {
		return nil, err
	}
	return res, settle(ctx, post)
}

// warmUp is how long atFraction offers its rate before it measures.
const warmUp = time.Second

// procCPUSeconds is the user + system CPU time of process pid so far, 0 if unknown.
func procCPUSeconds(pid int) float64 {
	f := procStat(pid)
	if len(f) < 13 {
		return 0
	}
	return (statTicks(f, 11) + statTicks(f, 12)) / 100 // USER_HZ, 100 on Linux
}

// treeCPUSeconds is the CPU time of process pid, of its live children and of the children
// it has reaped (Postgres's postmaster and its backends), 0 if unknown. A child that exits
// between two readings moves from the second term to the third, so differences stay right.
func treeCPUSeconds(pid int) float64 {
	f := procStat(pid)
	if pid == 0 || len(f) < 15 {
		return 0
	}
	ticks := statTicks(f, 11) + statTicks(f, 12) + statTicks(f, 13) + statTicks(f, 14) // utime stime cutime cstime
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, dir := range dirs {
		child, err := strconv.Atoi(filepath.Base(dir))
		if err != nil || child == pid {
			continue
		}
		if c := procStat(child); len(c) >= 13 && c[1] == strconv.Itoa(pid) { // c[1]: the parent
			ticks += statTicks(c, 11) + statTicks(c, 12)
		}
	}
	return ticks / 100
}

// procStat is /proc/PID/stat's fields from the state (field 3) on, nil if unknown: they follow
// the command name, which may hold spaces.
func procStat(pid int) []string {
	if pid == 0 {
		return nil
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	_, rest, ok := strings.Cut(string(b), ") ")
	if !ok {
		return nil
	}
	return strings.Fields(rest)
}

// statTicks is field i of procStat's fields as a number of clock ticks.
func statTicks(f []string, i int) float64 {
	v, _ := strconv.ParseFloat(f[i], 64)
	return v
}

// profileIngest records a CPU profile of the api while post, then noop, run at 80% of
// ingestion's sustained rate, into the run's temp dir (bench -profile): ingest-DB-N.pprof and
// noop-DB-N.pprof, for go tool pprof.
func profileIngest(ctx context.Context, s *stack, in *Ingest, plan ingestPlan, post, noop func(context.Context, int) error) error {
	if in.RequestsPerSec == 0 {
		return nil
	}
	secs := max(2, int((2 * plan.stepDur).Seconds()))
	rate := 0.8 * in.RequestsPerSec
	for _, run := range []struct {
		name string
		do   func(context.Context, int) error
	}{{"ingest", post}, {"noop", noop}} {
		path := filepath.Join(s.dir, fmt.Sprintf("%s-%s-%d.pprof", run.name, in.Database, in.EventsPerRequest))
		got := make(chan error, 1)
		go func() { got <- fetchProfile(ctx, s.pprofAPI, time.Duration(secs)*time.Second, path) }()
		openLoop{Rate: rate, N: int(rate * float64(secs+1)), MaxInFlight: 1024, Do: run.do}.run(ctx)
		if err := <-got; err != nil {
			return err
		}
		s.logf("  profile of %s %s %d/req at %.0f req/s: %s", run.name, in.Database, in.EventsPerRequest, rate, path)
		if err := settle(ctx, run.do); err != nil {
			return err
		}
	}
	return nil
}

// ingestRows adds the table's rows of one ingestion result.
func (in *Ingest) rows(add func(scenario, metric string, value float64, floor, ratio *float64, target string, met *bool)) {
	f := func(v float64) *float64 { return &v }
	b := func(v bool) *bool { return &v }
	name := fmt.Sprintf("ingest %s, %d/req", in.Database, in.EventsPerRequest)
	if in.HTTPFloor != nil {
		add(name, "http floor events/s (POST /bench/noop, same body)", in.HTTPFloor.EventsPerSec, nil, nil, "", nil)
	}
	if in.EventsPerRequest == 1 {
		add(name, "events/s (floor: lower of http and database)", in.EventsPerSec, f(in.MinFloor), f(in.RatioMin), fmt.Sprintf("≥ %.1f×", in.Target), b(in.Met))
		add(name, "events/s (beside: database floor)", in.EventsPerSec, f(in.FloorRowsPerSec), f(in.Ratio), "", nil)
	} else {
		add(name, "events/s (floor: database multi-row inserts)", in.EventsPerSec, f(in.FloorRowsPerSec), f(in.Ratio), fmt.Sprintf("≥ %.1f×", in.Target), b(in.Met))
		add(name, "events/s (beside: lower of http and database)", in.EventsPerSec, f(in.MinFloor), f(in.RatioMin), "", nil)
	}
	add(name, "p50 / p99 ms at the sustained rate", in.API.P50, f(in.API.P99), nil, "", nil)
	if a := in.At80; a != nil {
		add(name, fmt.Sprintf("p99 ms at 80%% (%.0f req/s; beside: no-op)", a.OfferedRequestsPerSec), a.Latency.P99, f(in.NoopAt80.Latency.P99), nil, fmt.Sprintf("< %.0f ms", in.TargetP99), b(in.MetP99))
		add(name, "p50 ms at 80% (beside: no-op)", a.Latency.P50, f(in.NoopAt80.Latency.P50), nil, "", nil)
		add(name, "api CPU µs/request at 80% (beside: no-op)", a.APICPUMicrosPerReq, f(in.NoopAt80.APICPUMicrosPerReq), f(a.APICPUMicrosPerReq/in.NoopAt80.APICPUMicrosPerReq), "", nil)
		add(name, "Redis commands/request at 80%", a.RedisCommandsPerReq, nil, nil, "", nil)
		add(name, "Redis CPU µs/request at 80%", a.RedisCPUMicrosPerReq, nil, nil, "", nil)
		n := in.NoopAt80
		add(name, "machine CPU µs/request at 80% (beside: no-op)", a.MachineCPUMicrosPerReq, f(n.MachineCPUMicrosPerReq), f(a.MachineCPUMicrosPerReq/n.MachineCPUMicrosPerReq), "", nil)
		add(name, "load generator CPU µs/request at 80% (beside: no-op)", a.LoadCPUMicrosPerReq, f(n.LoadCPUMicrosPerReq), nil, "", nil)
		if in.Database == "postgres" {
			add(name, "Postgres CPU µs/request at 80% (all its processes)", a.PostgresCPUMicrosPerReq, nil, nil, "", nil)
		}
		add(name, "worker CPU µs/request at 80%", a.WorkerCPUMicrosPerReq, nil, nil, "", nil)
		if a.MachineCPUMicrosPerReq > 0 && in.HTTPFloor != nil {
			// The rate the machine could answer with every core busy, against the floor.
			busy := float64(runtime.NumCPU()) / a.MachineCPUMicrosPerReq * 1e6 * float64(in.EventsPerRequest)
			add(name, "events/s with every core busy at that cost (beside: floor)", busy, f(in.MinFloor), f(busy/in.MinFloor), "", nil)
		}
	}
}
