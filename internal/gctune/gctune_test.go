package gctune

import (
	"runtime/debug"
	"testing"
)

// keep restores the collector's settings after the test.
func keep(t *testing.T) {
	percent, limit := debug.SetGCPercent(-1), debug.SetMemoryLimit(-1)
	debug.SetGCPercent(percent)
	t.Cleanup(func() {
		debug.SetGCPercent(percent)
		debug.SetMemoryLimit(limit)
	})
}

func env(vars map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := vars[k]
		return v, ok
	}
}

func TestApplySetsTheDefaultsWhenTheEnvironmentDoesNot(t *testing.T) {
	keep(t)
	debug.SetGCPercent(100)
	debug.SetMemoryLimit(1 << 62)
	got := Apply(env(nil))
	want := Settings{Percent: Percent, MemoryLimit: MemoryLimit}
	if got != want {
		t.Fatalf("Apply = %+v, want %+v", got, want)
	}
	if p := debug.SetGCPercent(Percent); p != Percent {
		t.Fatalf("GC percent in force %d, want %d", p, Percent)
	}
}

func TestApplyLeavesWhatTheEnvironmentSet(t *testing.T) {
	keep(t)
	debug.SetGCPercent(150)         // as the runtime would from GOGC=150
	debug.SetMemoryLimit(900 << 20) // and from GOMEMLIMIT=900MiB
	got := Apply(env(map[string]string{"GOGC": "150", "GOMEMLIMIT": "900MiB"}))
	want := Settings{Percent: 150, MemoryLimit: 900 << 20, PercentFromEnv: true, MemoryLimitFromEnv: true}
	if got != want {
		t.Fatalf("Apply = %+v, want %+v", got, want)
	}
}

func TestApplySetsOnlyWhatIsMissing(t *testing.T) {
	keep(t)
	debug.SetGCPercent(-1) // GOGC=off
	got := Apply(env(map[string]string{"GOGC": "off"}))
	want := Settings{Percent: -1, MemoryLimit: MemoryLimit, PercentFromEnv: true}
	if got != want {
		t.Fatalf("Apply = %+v, want %+v", got, want)
	}
}
