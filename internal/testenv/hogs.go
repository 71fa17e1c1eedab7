package testenv

import (
	"os"
	"os/exec"
	"strconv"
	"testing"
)

// CPUHogs starts EVENTQ_TEST_CPU_HOGS processes that each keep a core busy (`yes` into
// /dev/null), for a test whose claim must hold on a loaded machine (make test-loaded runs the
// whole suite so); none when the variable is unset or 0. The returned func stops them, as the
// test's end does.
func CPUHogs(t testing.TB) (stop func()) {
	t.Helper()
	n, _ := strconv.Atoi(os.Getenv("EVENTQ_TEST_CPU_HOGS"))
	var cmds []*exec.Cmd
	for range n {
		cmd := exec.Command("yes")
		if err := cmd.Start(); err != nil {
			t.Fatalf("start a CPU hog: %v", err)
		}
		cmds = append(cmds, cmd)
	}
	if n > 0 {
		t.Logf("%d CPU hogs beside the test", n)
	}
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		for _, c := range cmds {
			c.Process.Kill()
			c.Wait()
		}
	}
	t.Cleanup(stop)
	return stop
}
