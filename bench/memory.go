package main

import (
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// MemoryPeak is the peak resident set of the api and worker processes during one scenario
// (the highest of each kind of process, side apis included).
type MemoryPeak struct {
	Scenario  string  `json:"scenario"`
	APIMiB    float64 `json:"api_peak_rss_mib"`
	WorkerMiB float64 `json:"worker_peak_rss_mib"`
}

// peaks records each scenario's MemoryPeak. A process stopped during a scenario gives its
// high-water mark (VmHWM) as it stops; those still running at the scenario's end give theirs
// then, and those running at its start have the mark reset first (clear_refs 5), so that a
// scenario's figure is its own, not the highest since the process started.
type peaks struct {
	current *MemoryPeak // nil between scenarios
	all     []*MemoryPeak
}

// begin starts scenario name with the processes running.
func (m *peaks) begin(name string, running ...*proc) {
	m.current = &MemoryPeak{Scenario: name}
	m.all = append(m.all, m.current)
	for _, p := range running {
		if pid := p.pid(); pid != 0 {
			os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0)
		}
	}
}

// end closes the scenario with the processes still running.
func (m *peaks) end(running ...*proc) {
	for _, p := range running {
		m.note(p)
	}
	m.current = nil
}

// note records p's high-water mark in the current scenario, if any.
func (m *peaks) note(p *proc) {
	pid := p.pid()
	if m == nil || m.current == nil || pid == 0 {
		return
	}
	mib := peakRSS(pid)
	if strings.HasPrefix(p.name, "worker") {
		m.current.WorkerMiB = max(m.current.WorkerMiB, mib)
	} else {
		m.current.APIMiB = max(m.current.APIMiB, mib)
	}
}

// measure runs scenario name (fn), recording its MemoryPeak. It first writes back what the
// scenarios before left in the page cache: the kernel would, about 30 s after they wrote it,
// in bursts that commits in this one wait behind (quiesce).
func (s *stack) measure(name string, fn func() error) error {
	unix.Sync()
	s.peaks.begin(name, s.api, s.worker)
	err := fn()
	s.peaks.end(s.api, s.worker)
	return err
}
