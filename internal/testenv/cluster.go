package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisCluster is a real three-master Redis Cluster (no replicas) owned by one test.
type RedisCluster struct {
	Addrs []string
	t     testing.TB
}

// StartRedisCluster starts three redis-server nodes with cluster mode on, joins them with
// `redis-cli --cluster create` and waits until every node reports cluster_state:ok.
func StartRedisCluster(t testing.TB) *RedisCluster {
	t.Helper()
	if _, err := exec.LookPath("redis-cli"); err != nil {
		t.Fatal("redis-cli not found: install the Debian package redis-tools (make test does this)")
	}
	c := &RedisCluster{t: t}
	for range 3 {
		c.Addrs = append(c.Addrs, startClusterNode(t))
	}
	args := append([]string{"--cluster", "create"}, c.Addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	for _, addr := range c.Addrs {
		node := redis.NewClient(&redis.Options{Addr: addr})
		Eventually(t, 20*time.Second, "node "+addr+" reports cluster_state:ok", func() bool {
			info, err := node.ClusterInfo(context.Background()).Result()
			return err == nil && strings.Contains(info, "cluster_state:ok")
		})
		node.Close()
	}
	return c
}

// startClusterNode starts one cluster-mode redis-server and returns its address once it
// answers PING. A node that exits at its start (ErrRedisExited: its port or its bus port was
// taken in the meantime) is started again on other ports, up to five times.
func startClusterNode(t testing.TB) string {
	t.Helper()
	for attempt := 1; ; attempt++ {
		port, dir := clusterPort(t), t.TempDir()
		cmd, err := StartRedisServer(port, dir, "--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(dir, "nodes.conf"), "--cluster-node-timeout", "5000",
			"--appendonly", "no")
		switch {
		case err == nil:
			t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
			return fmt.Sprintf("127.0.0.1:%d", port)
		case errors.Is(err, ErrRedisExited) && attempt < 5:
			t.Logf("cluster node: %v; trying other ports", err)
		default:
			t.Fatalf("cluster node (attempt %d): %v", attempt, err)
		}
	}
}

// clusterPort returns a free port for a cluster node whose cluster bus port, 10,000 higher, is
// free too. Redis refuses to start a node on a port above 55535 (its bus port would not
// exist), and a fifth of the kernel's usual ephemeral range (32768–60999) is above it.
func clusterPort(t testing.TB) int {
	t.Helper()
	for range 100 {
		port := FreePort(t)
		if port > 55535 {
			continue
		}
		bus, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port+10000))
		if err != nil {
			continue
		}
		bus.Close()
		return port
	}
	t.Fatal("no free port with a free cluster bus port after 100 tries")
	return 0
}

// Client returns a cluster client closed at the end of the test.
func (c *RedisCluster) Client() *redis.ClusterClient {
	cl := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs})
	c.t.Cleanup(func() { cl.Close() })
	return cl
}
