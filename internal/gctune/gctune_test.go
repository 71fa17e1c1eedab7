package gctune

import (
	"os"
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
	got := Apply(env(nil), noCgroup)
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
	got := Apply(env(map[string]string{"GOGC": "150", "GOMEMLIMIT": "900MiB"}), cgroup("1073741824"))
	want := Settings{Percent: 150, MemoryLimit: 900 << 20, PercentFromEnv: true, MemoryLimitFromEnv: true}
	if got != want {
		t.Fatalf("Apply = %+v, want %+v", got, want)
	}
}

func TestApplySetsOnlyWhatIsMissing(t *testing.T) {
	keep(t)
	debug.SetGCPercent(-1) // GOGC=off
	got := Apply(env(map[string]string{"GOGC": "off"}), noCgroup)
	want := Settings{Percent: -1, MemoryLimit: MemoryLimit, PercentFromEnv: true}
	if got != want {
		t.Fatalf("Apply = %+v, want %+v", got, want)
	}
}

func noCgroup(string) ([]byte, error) { return nil, os.ErrNotExist }

// cgroup is a cgroup v2 file system whose memory.max says v.
func cgroup(v string) func(string) ([]byte, error) {
	return func(path string) ([]byte, error) {
		if path == "/sys/fs/cgroup/memory.max" {
			return []byte(v + "\n"), nil
		}
		return nil, os.ErrNotExist
	}
}

// Without GOMEMLIMIT the limit is three quarters of the container's (cgroup v2 or v1); no limit
// ("max", v1's huge value) leaves the default.
func TestApplyFollowsTheContainerLimit(t *testing.T) {
	keep(t)
	got := Apply(env(nil), cgroup("1073741824"))
	if want := (Settings{Percent: Percent, MemoryLimit: 768 << 20, ContainerLimit: 1 << 30}); got != want {
		t.Fatalf("Apply = %+v, want %+v", got, want)
	}
	v1 := func(path string) ([]byte, error) {
		if path == "/sys/fs/cgroup/memory/memory.limit_in_bytes" {
			return []byte("536870912\n"), nil
		}
		return nil, os.ErrNotExist
	}
	if got := Apply(env(nil), v1); got.MemoryLimit != 384<<20 || got.ContainerLimit != 512<<20 {
		t.Fatalf("cgroup v1: Apply = %+v", got)
	}
	for _, none := range []string{"max", "9223372036854771712"} {
		if got := Apply(env(nil), cgroup(none)); got.MemoryLimit != MemoryLimit || got.ContainerLimit != 0 {
			t.Fatalf("memory.max %s: Apply = %+v", none, got)
		}
	}
}
