package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/eventq/eventq/internal/database"
)

// exportSmall is the small export tenant's events: its peak RSS is the one the large
// export's is compared with.
const exportSmall = 10_000

// ExportRun is one eventq events export of a tenant.
type ExportRun struct {
	Format       string  `json:"format"`
	Events       int     `json:"events"`
	Destination  string  `json:"destination"`
	Seconds      float64 `json:"seconds"`
	EventsPerSec float64 `json:"events_per_second"`
	PeakRSSMiB   float64 `json:"peak_rss_mib"` // the child's rusage maxrss
}

// benchExport builds the eventq CLI and runs events export, jsonl and parquet, of a tenant
// with exportSmall events and of one with rp.exportRows: the small ones into files that are
// checked, the large ones into /dev/null.
func benchExport(ctx context.Context, s *stack, rp retentionPlan) ([]*ExportRun, error) {
	root, err := moduleRoot()
	if err != nil {
		return nil, err
	}
	build := exec.CommandContext(ctx, "go", "build", "-o", s.binDir+"/", "./cmd/eventq")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build ./cmd/eventq: %v: %s", err, bytes.TrimSpace(out))
	}
	bin := filepath.Join(s.binDir, "eventq")
	day := database.Day(time.Now()).AddDate(0, 0, -2)
	var tenants []*tenant
	for _, n := range []int{exportSmall, rp.exportRows} {
		t, err := s.seedTenant(ctx, "", false)
		if err != nil {
			return nil, err
		}
		if err := fillEvents(ctx, s.dbURL, s.db, t.ID, n, day, day.AddDate(0, 0, 2)); err != nil {
			return nil, err
		}
		tenants = append(tenants, t)
	}
	if err := quiesce(ctx, s); err != nil {
		return nil, err
	}
	var out []*ExportRun
	for _, format := range []string{"jsonl", "parquet"} {
		for i, n := range []int{exportSmall, rp.exportRows} {
			dest := os.DevNull
			if i == 0 {
				dest = filepath.Join(s.dir, "export."+format)
			}
			r, err := runExport(ctx, s, bin, tenants[i].ID, format, n, dest)
			if err != nil {
				return out, err
			}
			if i == 0 {
				if err := checkExport(dest, format, n); err != nil {
					return out, err
				}
			}
			s.logf("  export %s of %d events: %.2fs, %.0f events/s, peak RSS %.1f MiB", format, n, r.Seconds, r.EventsPerSec, r.PeakRSSMiB)
			out = append(out, r)
		}
	}
	return out, nil
}

func runExport(ctx context.Context, s *stack, bin string, tenantID uint64, format string, n int, dest string) (*ExportRun, error) {
	f, err := os.Create(dest)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cmd := exec.CommandContext(ctx, bin, "events", "export", "--tenant", strconv.FormatUint(tenantID, 10), "--format", format)
	cmd.Env = append(os.Environ(), "DATABASE_URL="+s.dbURL, "REDIS_URL="+s.redisURL)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = f, &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("eventq events export --format %s: %v: %s", format, err, bytes.TrimSpace(stderr.Bytes()))
	}
	d := time.Since(start)
	r := &ExportRun{Format: format, Events: n, Destination: dest, Seconds: d.Seconds(), EventsPerSec: float64(n) / d.Seconds()}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		r.PeakRSSMiB = float64(ru.Maxrss) / 1024 // KiB on Linux
	}
	if dest != os.DevNull {
		r.Destination = "file"
	}
	return r, nil
}

// checkExport checks that an export file holds n events: n lines of JSON, or a Parquet file.
func checkExport(path, format string, n int) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if format == "parquet" {
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if len(b) < 8 || string(b[:4]) != "PAR1" || string(b[len(b)-4:]) != "PAR1" {
			return fmt.Errorf("export parquet: %d bytes, not a Parquet file", len(b))
		}
		return nil
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	lines := 0
	for sc.Scan() {
		if lines == 0 && !strings.HasPrefix(sc.Text(), "{") {
			return fmt.Errorf("export jsonl: the first line is not JSON: %.80q", sc.Text())
		}
		lines++
	}
	if lines != n {
		return fmt.Errorf("export jsonl: %d lines, want %d", lines, n)
	}
	return sc.Err()
}
