// Package gctune sets the garbage collector's defaults of eventq's server processes (api and
// worker). Their live heap is small (6–12 MB while ingesting), so at Go's default GOGC=100 the
// collector runs every few megabytes allocated: at fifty events a request it took a fifth of
// the api's CPU. A higher GOGC runs it a quarter as often; a soft memory limit makes it work
// harder only when a process's memory approaches the limit (many concurrent reads of full
// pages), so the higher GOGC cannot grow a process without bound.
//
// The Go runtime's own variables win: a process started with GOGC or GOMEMLIMIT set keeps the
// value the runtime read from it.
package gctune

import "runtime/debug"

// Defaults applied when the environment does not set them.
const (
	Percent     = 400       // GOGC: the heap may grow to five times what was live after a collection
	MemoryLimit = 384 << 20 // GOMEMLIMIT: 384 MiB, three quarters of the manifests' 512Mi limit
)

// Settings is what the collector runs with after Apply, and where each value came from.
type Settings struct {
	Percent            int
	MemoryLimit        int64
	PercentFromEnv     bool
	MemoryLimitFromEnv bool
}

// Apply sets Percent and MemoryLimit unless the environment (read through lookup, e.g.
// os.LookupEnv) sets GOGC or GOMEMLIMIT, and returns what is in force.
func Apply(lookup func(string) (string, bool)) Settings {
	var s Settings
	_, s.PercentFromEnv = lookup("GOGC")
	_, s.MemoryLimitFromEnv = lookup("GOMEMLIMIT")
	if !s.PercentFromEnv {
		debug.SetGCPercent(Percent)
	}
	if !s.MemoryLimitFromEnv {
		debug.SetMemoryLimit(MemoryLimit)
	}
	s.Percent = debug.SetGCPercent(-1)
	debug.SetGCPercent(s.Percent)
	s.MemoryLimit = debug.SetMemoryLimit(-1) // a negative limit reads it without changing it
	return s
}
