package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A test's Redis killed with SIGKILL comes back with every write it had answered: the
// outage tests count on it.
func TestRedisKeepsEveryAnsweredWriteThroughAKill(t *testing.T) {
	r := StartRedis(t)
	c := r.Client()
	ctx := context.Background()
	const n = 500
	for i := range n {
		Must(t, c.RPush(ctx, "answered", fmt.Sprint(i)).Err())
	}
	r.Kill()
	r.Start()
	got, err := c.LRange(ctx, "answered", 0, -1).Result()
	Must(t, err)
	if len(got) != n || got[0] != "0" || got[n-1] != fmt.Sprint(n-1) {
		t.Fatalf("after a kill: %d writes kept (first %q), want all %d", len(got), got[:min(1, len(got))], n)
	}
}

// A redis-server that exits at its start is reported as ErrRedisExited at once, with what it
// printed, not after the PING deadline: startClusterNode tries other ports on it. In cluster
// mode Redis refuses a port above 55535 (its bus port would not exist), the clash
// clusterPort avoids.
func TestARedisThatExitsAtItsStartIsReportedAtOnce(t *testing.T) {
	port := 0
	for p := 65535; p > 55535 && port == 0; p-- {
		if l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p)); err == nil {
			l.Close()
			port = p
		}
	}
	dir := t.TempDir()
	start := time.Now()
	cmd, err := StartRedisServer(port, dir, "--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, "nodes.conf"))
	if err == nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("a cluster node started on port %d", port)
	}
	if !errors.Is(err, ErrRedisExited) || !strings.Contains(err.Error(), "too high") {
		t.Fatalf("%v; want ErrRedisExited with the server's message", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("reported after %s, want at once", took)
	}
}
