package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/eventq/eventq/internal/gctune"
	"github.com/eventq/eventq/internal/testenv"
)

// lastLogLine is the message of a process's last JSON log line.
func lastLogLine(t *testing.T, p *testenv.Process) string {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(p.Log()), "\n")
	var line struct{ Msg string }
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &line); err != nil {
		t.Fatalf("last log line %q: %v", lines[len(lines)-1], err)
	}
	return line.Msg
}

// The api and the worker log the collector's settings at start-up (gctune's defaults when the
// environment sets neither GOGC nor GOMEMLIMIT), and each ends its log with a line saying they
// stopped, once SIGTERM has made them finish shutting down, and not before.
func TestProcessesLogThatTheyStopped(t *testing.T) {
	s := startStack(t)
	testenv.Eventually(t, 20*time.Second, "the worker runs", func() bool {
		return strings.Contains(s.Worker.Log(), `"msg":"worker: running"`)
	})
	if _, set := os.LookupEnv("GOGC"); !set {
		if _, set := os.LookupEnv("GOMEMLIMIT"); !set { // the processes run with gctune's defaults
			want := fmt.Sprintf(`"gogc":%d,"gomemlimit":%d`, gctune.Percent, gctune.MemoryLimit)
			for _, p := range []*testenv.Process{s.API, s.Worker} {
				if !strings.Contains(p.Log(), want) {
					t.Errorf("start-up log without %s:\n%s", want, p.Log())
				}
			}
		}
	}
	for _, p := range []struct {
		proc *testenv.Process
		want string
	}{{s.API, "api: stopped"}, {s.Worker, "worker: stopped"}} {
		if strings.Contains(p.proc.Log(), p.want) {
			t.Fatalf("%q logged before SIGTERM:\n%s", p.want, p.proc.Log())
		}
		p.proc.Stop() // SIGTERM, and waits for the exit
		if got := lastLogLine(t, p.proc); got != p.want {
			t.Errorf("last log line after SIGTERM %q, want %q; log:\n%s", got, p.want, p.proc.Log())
		}
	}
}
