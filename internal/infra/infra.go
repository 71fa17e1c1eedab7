// Package infra opens the connections every eventq process shares: the database, the named
// Redis connections and the stores built directly on them.
package infra

import (
	"context"
	"errors"
	"fmt"

	"github.com/hibiken/asynq"
	asynqmetrics "github.com/hibiken/asynq/x/metrics"
	"gorm.io/gorm"

	"github.com/eventq/eventq/internal/clock"
	"github.com/eventq/eventq/internal/config"
	"github.com/eventq/eventq/internal/database"
	"github.com/eventq/eventq/internal/eventqueue"
	"github.com/eventq/eventq/internal/features"
	"github.com/eventq/eventq/internal/metrics"
	"github.com/eventq/eventq/internal/redisconn"
)

// Infra is a process's shared connections. Close releases them.
type Infra struct {
	DB    *gorm.DB
	Redis redisconn.Set
	Queue *eventqueue.Store
	Flags *features.Flags
}

// Open connects to what cfg names; clk times the flag cache. It does not migrate and does not
// wait for Redis.
func Open(cfg config.Config, clk clock.Clock) (*Infra, error) {
	db, err := database.Open(cfg.DatabaseURL)
	if err != nil {
		return nil, err
	}
	rdb, err := redisconn.Open(cfg.Redis)
	if err != nil {
		database.Close(db)
		return nil, err
	}
	qc, ok := rdb[cfg.QueueConnection]
	if !ok { // Validate guarantees it
		return nil, fmt.Errorf("infra: no redis connection %q", cfg.QueueConnection)
	}
	queue := eventqueue.New(qc)
	queue.MaxLength = cfg.Limits.QueueMaxLength
	return &Infra{DB: db, Redis: rdb, Queue: queue, Flags: features.New(db, clk)}, nil
}

// Metrics returns a process's metrics: eventq's own, and asynq's queue sizes and latencies read
// from the default Redis connection. The api and the worker both export them.
func (in *Infra) Metrics() *metrics.Metrics {
	mx := metrics.New()
	mx.Registry.MustRegister(asynqmetrics.NewQueueMetricsCollector(asynq.NewInspectorFromRedisClient(in.Redis[config.DefaultConnection])))
	return mx
}

// PingDB reports whether the database answers within ctx.
func (in *Infra) PingDB(ctx context.Context) error {
	sqlDB, err := in.DB.DB()
	if err != nil {
		return err
	}
	return sqlDB.PingContext(ctx)
}

// Close closes every connection.
func (in *Infra) Close() error {
	in.Queue.Close()
	return errors.Join(in.Redis.Close(), database.Close(in.DB))
}
