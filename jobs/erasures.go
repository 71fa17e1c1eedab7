package jobs

import (
	"context"
	"log/slog"
	"time"
)

// Eraser carries out the pending erasures (erasure.Service is one).
type Eraser interface {
	RunPending(ctx context.Context) (int, error)
}

// ErasurePollInterval is how often a worker looks for pending erasures.
const ErasurePollInterval = time.Second

// RunErasures carries out pending erasures every ErasurePollInterval until ctx is done. An
// erasure is a row from its request on, so one the worker was killed in the middle of is
// taken up again at the next look; two workers doing the same one do it once (see erasure.Run).
// A failure is logged once until a look succeeds again; erased values are never logged.
func RunErasures(ctx context.Context, e Eraser, log *slog.Logger) {
	t := time.NewTicker(ErasurePollInterval)
	defer t.Stop()
	failing := false
	for {
		n, err := e.RunPending(ctx)
		switch {
		case err != nil && ctx.Err() == nil && !failing:
			log.Warn("worker: erasures could not be carried out; trying again", "err", err)
			failing = true
		case err == nil:
			if n > 0 {
				log.Info("worker: erasures done", "count", n)
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
