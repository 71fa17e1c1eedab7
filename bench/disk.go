package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// DiskSecond is one second of what the disk under the bench's files did, read beside
// ingestion's p99 in that second: a stall of commits is either the disk's or it is not.
type DiskSecond struct {
	WriteMiB float64 `json:"write_mib"`
	// DirtyMiB is the page cache waiting to be written back at the end of the second
	// (Dirty and Writeback in /proc/meminfo), whoever wrote it.
	DirtyMiB   float64 `json:"dirty_mib"`
	DiscardMiB float64 `json:"discard_mib"` // files deleted on a filesystem mounted with discard
	Flushes    int64   `json:"flushes"`
	// ProbeMaxMs is the slowest of a probe's 4 KiB writes and fdatasyncs (one every
	// probeEvery) to a file in the bench's dir: what a commit's flush alone waited for.
	ProbeMaxMs float64 `json:"fsync_probe_max_ms"`
	// IOFullMs is the time in the second when every runnable task waited for I/O (PSI).
	IOFullMs float64 `json:"io_full_ms"`
	// Waits counts Postgres's server processes seen waiting (sampled every waitsEvery), by
	// backend type and wait event, the most seen first.
	Waits string `json:"pg_waits,omitempty"`
}

// The probe writes often enough to catch a stall of a fraction of a second, and the waits are
// sampled less often since each sample is a query to the Postgres being measured.
const (
	probeEvery = 20 * time.Millisecond
	waitsEvery = 50 * time.Millisecond
)

// diskBySecond samples the disk until ctx ends and returns one DiskSecond a second. On
// Postgres it also samples pg_stat_activity.
func diskBySecond(ctx context.Context, s *stack) []DiskSecond {
	dev, err := blockDevice(s.dir)
	if err != nil {
		s.logf("  disk sampler: %v", err)
		return nil
	}
	probe, err := os.OpenFile(filepath.Join(s.dir, "fsync-probe"), os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		s.logf("  disk sampler: %v", err)
		return nil
	}
	defer os.Remove(probe.Name())
	defer probe.Close()

	var mu sync.Mutex
	var probeMax time.Duration
	waits := map[string]int{}
	var wg sync.WaitGroup
	page := make([]byte, 4096)
	wg.Add(1)
	go func() { // the fsync probe
		defer wg.Done()
		every(ctx, probeEvery, func() bool {
			start := time.Now()
			if _, err := probe.WriteAt(page, 0); err != nil {
				return false
			}
			if err := unix.Fdatasync(int(probe.Fd())); err != nil {
				return false
			}
			took := time.Since(start)
			mu.Lock()
			probeMax = max(probeMax, took)
			mu.Unlock()
			return true
		})
	}()
	if strings.HasPrefix(s.dbURL, "postgres") {
		wg.Add(1)
		go func() { // what Postgres's processes wait on
			defer wg.Done()
			every(ctx, waitsEvery, func() bool {
				var rows []struct{ Kind string }
				err := s.db.WithContext(ctx).Raw(`SELECT backend_type || ' ' || wait_event_type || ':' || wait_event AS kind
					FROM pg_stat_activity WHERE wait_event IS NOT NULL AND pid <> pg_backend_pid()
					AND wait_event_type NOT IN ('Activity', 'Client', 'Extension')`).Scan(&rows).Error
				if err != nil {
					return false
				}
				mu.Lock()
				for _, r := range rows {
					waits[r.Kind]++
				}
				mu.Unlock()
				return true
			})
		}()
	}

	var out []DiskSecond
	last, lastFull := readDiskStats(dev), readIOFull()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			wg.Wait()
			return out
		case <-t.C:
		}
		now, full := readDiskStats(dev), readIOFull()
		mu.Lock()
		sec := DiskSecond{
			WriteMiB:   float64(now.writeSectors-last.writeSectors) * 512 / (1 << 20),
			DirtyMiB:   kBFieldMiB("/proc/meminfo", "Dirty:") + kBFieldMiB("/proc/meminfo", "Writeback:"),
			DiscardMiB: float64(now.discardSectors-last.discardSectors) * 512 / (1 << 20),
			Flushes:    now.flushes - last.flushes,
			ProbeMaxMs: float64(probeMax.Microseconds()) / 1000,
			IOFullMs:   float64(full-lastFull) / 1000,
			Waits:      topWaits(waits, 3),
		}
		probeMax, waits = 0, map[string]int{}
		mu.Unlock()
		out = append(out, sec)
		last, lastFull = now, full
	}
}

// every calls fn every d until ctx ends or fn returns false.
func every(ctx context.Context, d time.Duration, fn func() bool) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !fn() {
			return
		}
	}
}

// sampleDisk starts diskBySecond; the func it returns stops it and gives its seconds.
func sampleDisk(ctx context.Context, s *stack) func() []DiskSecond {
	ctx, stop := context.WithCancel(ctx)
	out := make(chan []DiskSecond, 1)
	go func() { out <- diskBySecond(ctx, s) }()
	return func() []DiskSecond { stop(); return <-out }
}

// topWaits formats the n most counted waits as "kind ×count; …".
func topWaits(waits map[string]int, n int) string {
	kinds := make([]string, 0, len(waits))
	for k := range waits {
		kinds = append(kinds, k)
	}
	sort.Slice(kinds, func(i, j int) bool { return waits[kinds[i]] > waits[kinds[j]] })
	var parts []string
	for _, k := range kinds[:min(n, len(kinds))] {
		parts = append(parts, fmt.Sprintf("%s ×%d", k, waits[k]))
	}
	return strings.Join(parts, "; ")
}

type diskStats struct{ writeSectors, discardSectors, flushes int64 }

// blockDevice names the device under dir as /proc/diskstats does ("major minor").
func blockDevice(dir string) (string, error) {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return "", err
	}
	return fmt.Sprintf("%d %d", unix.Major(st.Dev), unix.Minor(st.Dev)), nil
}

// readDiskStats reads dev's counters from /proc/diskstats; zero if they are not there.
func readDiskStats(dev string) diskStats {
	b, _ := os.ReadFile("/proc/diskstats")
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 20 || f[0]+" "+f[1] != dev {
			continue
		}
		n := func(i int) int64 { v, _ := strconv.ParseInt(f[i], 10, 64); return v }
		return diskStats{writeSectors: n(9), discardSectors: n(16), flushes: n(18)}
	}
	return diskStats{}
}

// readIOFull is the total µs every task stalled on I/O (/proc/pressure/io); zero without PSI.
func readIOFull() int64 {
	b, _ := os.ReadFile("/proc/pressure/io")
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "full ") {
			continue
		}
		_, total, _ := strings.Cut(line, "total=")
		v, _ := strconv.ParseInt(strings.TrimSpace(total), 10, 64)
		return v
	}
	return 0
}

// logDisk logs secs, one line a second.
func logDisk(s *stack, when string, secs []DiskSecond) {
	s.logf("  the disk by second %s (write MiB, dirty MiB, discard MiB, flushes, fsync probe max ms, I/O full ms; Postgres's waits):", when)
	for i, d := range secs {
		s.logf("    %3d  %6.1f %6.1f %6.1f %5d %7.1f %6.1f  %s", i, d.WriteMiB, d.DirtyMiB, d.DiscardMiB, d.Flushes, d.ProbeMaxMs, d.IOFullMs, d.Waits)
	}
}
