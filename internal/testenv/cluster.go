package testenv

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
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
	for i := 0; i < 3; i++ {
		port, dir := FreePort(t), t.TempDir()
		cmd := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, "nodes.conf"),
			"--cluster-node-timeout", "5000", "--save", "", "--appendonly", "no", "--dir", dir,
			"--loglevel", "warning")
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatalf("start cluster node: %v", err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		c.Addrs = append(c.Addrs, addr)
		node := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
		Eventually(t, 10*time.Second, "cluster node "+addr+" answers PING", func() bool {
			return node.Ping(context.Background()).Err() == nil
		})
		node.Close()
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

// Client returns a cluster client closed at the end of the test.
func (c *RedisCluster) Client() *redis.ClusterClient {
	cl := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs})
	c.t.Cleanup(func() { cl.Close() })
	return cl
}
