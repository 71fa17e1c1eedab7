package main

import (
	"log/slog"
	"time"

	"github.com/hibiken/asynq"

	"github.com/eventq/eventq/jobs"
)

// taskCheckInterval is how long an idle worker waits before it looks for a new task again:
// asynq sleeps between half and one and a half of it after finding its queues empty, and
// does not wake up when a task arrives. Below the worker's capacity that sleep is most of a
// webhook's time to its purchase, so it is short; an idle worker then asks Redis often, one
// short script each time (docs/performance-log.md has the figures).
const taskCheckInterval = 5 * time.Millisecond

// serverConfig is the worker's asynq server configuration.
func serverConfig(log *slog.Logger) asynq.Config {
	return asynq.Config{
		// Fulfilments mostly wait on the database's commit (its WAL flush); 20 at a time kept
		// up with 1,000 paid sessions a second where 10 fell behind (make bench, fulfilment).
		Concurrency:     20,
		Queues:          map[string]int{jobs.TaskQueue: 1},
		ShutdownTimeout: 10 * time.Second,
		RetryDelayFunc:  jobs.RetryDelay,
		// asynq's default is 1 s, which would be the webhook-to-purchase latency of a quiet
		// system.
		TaskCheckInterval:        taskCheckInterval,
		DelayedTaskCheckInterval: time.Second,
		Logger:                   asynqLogger{log},
		LogLevel:                 asynq.WarnLevel,
	}
}
