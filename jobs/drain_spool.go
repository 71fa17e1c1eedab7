package jobs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"os"
	"time"
)

// SpoolDrainer stores the spooled tracking requests (tracking.Ingestor is one).
type SpoolDrainer interface {
	DrainSpool(ctx context.Context, owner string) (int, error)
}

// SpoolPollInterval is how often a worker looks at the ingestion spool.
const SpoolPollInterval = 500 * time.Millisecond

// RunSpoolDrain drains the ingestion spool every SpoolPollInterval until ctx is done: the
// requests the api kept in Redis while the database could not be reached are stored once it
// answers, by one worker at a time (the drainer's lock). A failed drain (the database still
// down) is logged once per outage and tried again at the next tick.
func RunSpoolDrain(ctx context.Context, d SpoolDrainer, log *slog.Logger) {
	owner := spoolOwner()
	t := time.NewTicker(SpoolPollInterval)
	defer t.Stop()
	failing := false
	for {
		start := time.Now()
		n, err := d.DrainSpool(ctx, owner)
		switch {
		case err != nil && ctx.Err() == nil && !failing:
			log.Warn("worker: the ingestion spool could not be drained; trying again", "err", err)
			failing = true
		case err == nil:
			if failing || n > 0 {
				log.Info("worker: spooled tracking events stored", "events", n, "seconds", time.Since(start).Seconds())
			}
			failing = false
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// spoolOwner names this process as the drain lock's holder.
func spoolOwner() string {
	b := make([]byte, 6)
	rand.Read(b)
	host, _ := os.Hostname()
	return host + "-" + hex.EncodeToString(b)
}
