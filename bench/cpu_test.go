package main

import (
	"os"
	"os/exec"
	"testing"
)

// A child's CPU time counts in its parent's tree once it has exited and been waited for (the
// way Postgres's backends count in the postmaster's), as well as while it runs.
func TestTreeCPUCountsReapedChildren(t *testing.T) {
	before := treeCPUSeconds(os.Getpid())
	cmd := exec.Command("sh", "-c", "i=0; while [ $i -lt 400000 ]; do i=$((i+1)); done")
	if err := cmd.Run(); err != nil {
		t.Skip("no sh to burn CPU with:", err)
	}
	child := (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
	if child < 0.05 {
		t.Fatalf("the child used only %.3f s of CPU: too little to see in 10 ms ticks", child)
	}
	got := treeCPUSeconds(os.Getpid()) - before
	if got < child-0.02 {
		t.Fatalf("the tree's CPU grew by %.3f s while a child used %.3f s and was reaped", got, child)
	}
	if procCPUSeconds(os.Getpid()) > treeCPUSeconds(os.Getpid()) {
		t.Fatal("a process's own CPU time exceeds its tree's")
	}
	if treeCPUSeconds(0) != 0 || procCPUSeconds(0) != 0 {
		t.Fatal("an unknown process has CPU time")
	}
}
