// Package gctune sets the garbage collector's defaults of eventq's server processes (api and
// worker). Their live heap is small, so at Go's default GOGC=100 the collector runs every few
// megabytes allocated and takes a large share of a busy api's CPU (docs/performance-log.md). A
// higher GOGC runs it less often; a soft memory limit makes it work
// harder only when a process's memory approaches the limit (many concurrent reads of full
// pages), so the higher GOGC cannot grow a process without bound.
//
// The Go runtime's own variables win: a process started with GOGC or GOMEMLIMIT set keeps the
// value the runtime read from it. Without GOMEMLIMIT the limit follows the container's memory
// limit (the cgroup's), so a deployment that gives a process more or less memory moves it too.
package gctune

import (
	"runtime/debug"
	"strconv"
	"strings"
)

// Defaults applied when the environment does not set them.
const (
	Percent     = 400       // GOGC: the heap may grow to five times what was live after a collection
	MemoryLimit = 384 << 20 // GOMEMLIMIT without a container limit: three quarters of 512 MiB
)

// ContainerShare is the share of the container's memory limit that becomes the soft memory
// limit when GOMEMLIMIT is not set: the rest is for what the collector does not count (stacks
// of the runtime's own, the binary, the kernel's buffers charged to the container).
const ContainerShare = 0.75

// cgroupLimits are where a container's memory limit is read: cgroup v2, then v1.
var cgroupLimits = []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}

// Settings is what the collector runs with after Apply, and where each value came from.
type Settings struct {
	Percent            int
	MemoryLimit        int64
	PercentFromEnv     bool
	MemoryLimitFromEnv bool
	// ContainerLimit is the container's memory limit MemoryLimit was derived from (0: none
	// read, MemoryLimit is the default or the environment's).
	ContainerLimit int64
}

// Apply sets Percent and the memory limit unless the environment (read through lookup, e.g.
// os.LookupEnv) sets GOGC or GOMEMLIMIT, and returns what is in force. Without GOMEMLIMIT the
// limit is ContainerShare of the container's memory limit, read through readFile (e.g.
// os.ReadFile) from the cgroup files, or MemoryLimit when there is none.
func Apply(lookup func(string) (string, bool), readFile func(string) ([]byte, error)) Settings {
	var s Settings
	_, s.PercentFromEnv = lookup("GOGC")
	_, s.MemoryLimitFromEnv = lookup("GOMEMLIMIT")
	if !s.PercentFromEnv {
		debug.SetGCPercent(Percent)
	}
	if !s.MemoryLimitFromEnv {
		limit := int64(MemoryLimit)
		if c := containerLimit(readFile); c > 0 {
			s.ContainerLimit, limit = c, int64(float64(c)*ContainerShare)
		}
		debug.SetMemoryLimit(limit)
	}
	s.Percent = debug.SetGCPercent(-1)
	debug.SetGCPercent(s.Percent)
	s.MemoryLimit = debug.SetMemoryLimit(-1) // a negative limit reads it without changing it
	return s
}

// containerLimit is the container's memory limit in bytes, 0 when there is none ("max", a
// value too large to be one, or no cgroup file).
func containerLimit(readFile func(string) ([]byte, error)) int64 {
	for _, path := range cgroupLimits {
		b, err := readFile(path)
		if err != nil {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil || n <= 0 || n >= 1<<50 { // "max", or v1's "no limit" (a page-rounded 2^63)
			return 0
		}
		return n
	}
	return 0
}
