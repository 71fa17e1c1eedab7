// Package redisconn opens eventq's named Redis connections.
package redisconn

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/eventq/eventq/internal/config"
)

// readBufferSize is each connection's read buffer. A queue read is one multi-megabyte LRANGE
// reply; go-redis's 32 KiB default turns it into a hundred read calls.
const readBufferSize = 512 << 10

// Set is the named connections of one process. Close closes all of them.
type Set map[string]redis.UniversalClient

// Open creates a client per configured connection. No connection is attempted; use Ping.
// Commands honour their context's deadline (go-redis ignores it by default and waits for its
// own 3 s read timeout and retries), so a caller can bound a round trip to a hung server.
// With ClusterAddrs set, the default connection is a Redis Cluster client.
func Open(cfg config.RedisConfig) (Set, error) {
	set := Set{}
	for name, raw := range cfg.URLs {
		opt, err := redis.ParseURL(raw)
		if err != nil {
			set.Close()
			return nil, fmt.Errorf("redis: %s: %w", config.RedisVar(name), err)
		}
		if name == config.DefaultConnection && len(cfg.ClusterAddrs) > 0 {
			set[name] = redis.NewClusterClient(&redis.ClusterOptions{
				Addrs: cfg.ClusterAddrs, Username: opt.Username, Password: opt.Password,
				TLSConfig: opt.TLSConfig, DialTimeout: 5 * time.Second, ReadBufferSize: readBufferSize,
				ContextTimeoutEnabled: true,
			})
			continue
		}
		opt.DialTimeout = 5 * time.Second
		opt.ReadBufferSize = readBufferSize
		opt.ContextTimeoutEnabled = true
		set[name] = redis.NewClient(opt)
	}
	return set, nil
}

// Ping checks every connection, naming the first that fails.
func (s Set) Ping(ctx context.Context) error {
	names := make([]string, 0, len(s))
	for name := range s {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if err := s[name].Ping(ctx).Err(); err != nil {
			return fmt.Errorf("redis %q: %w", name, err)
		}
	}
	return nil
}

// Close closes every connection.
func (s Set) Close() error {
	var errs []error
	for _, c := range s {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}
