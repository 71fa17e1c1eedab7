package consume

import (
	"cmp"
	"context"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/eventq/eventq/internal/clock"
	"github.com/eventq/eventq/internal/eventqueue"
	"github.com/eventq/eventq/models"
)

// TrimFlushEvery is how often a TrimLog writes the fronts recorded since its last write.
const TrimFlushEvery = 250 * time.Millisecond

// TrimLog records each trim's new queue front in the database (models.QueueFront), so that
// Rebuild knows which stored events a lost queue held. Record only notes the front in memory;
// a background loop writes what changed every TrimFlushEvery in one statement, off the request
// path. A crash loses at most the last interval's fronts: those events come back on a rebuild.
type TrimLog struct {
	db    *gorm.DB
	clock clock.Clock
	log   *slog.Logger

	mu      sync.Mutex
	pending map[uint64]models.QueueFront

	stop  chan struct{}
	done  chan struct{}
	final error // the last flush's, once done is closed
}

// NewTrimLog starts a TrimLog on db; clk stamps the rows. Close writes what is left and stops it.
func NewTrimLog(db *gorm.DB, clk clock.Clock, log *slog.Logger) *TrimLog {
	l := &TrimLog{db: db, clock: clk, log: log, pending: map[uint64]models.QueueFront{}, stop: make(chan struct{}), done: make(chan struct{})}
	go l.loop()
	return l
}

// Record notes tenantID's front after trimmed.
func (l *TrimLog) Record(tenantID uint64, trimmed eventqueue.Trimmed) {
	if trimmed.Count == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pending[tenantID] = merge(l.pending[tenantID], models.QueueFront{
		TenantID: tenantID, Front: trimmed.Front, TrimmedThrough: trimmed.LastID,
	})
}

// merge keeps the further front of a and b, and the larger last-trimmed id.
func merge(a, b models.QueueFront) models.QueueFront {
	out := b
	out.Front = max(a.Front, b.Front)
	out.TrimmedThrough = max(a.TrimmedThrough, b.TrimmedThrough)
	return out
}

func (l *TrimLog) loop() {
	defer close(l.done)
	tick := time.NewTicker(TrimFlushEvery)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			l.Flush(context.Background())
		case <-l.stop:
			l.final = l.Flush(context.Background())
			return
		}
	}
}

// Flush writes the recorded fronts now. A front only moves forward: a write that arrives late
// (another process recorded a further front meanwhile) changes nothing. On failure the fronts
// are kept for the next flush.
func (l *TrimLog) Flush(ctx context.Context) error {
	l.mu.Lock()
	batch := l.pending
	l.pending = map[uint64]models.QueueFront{}
	l.mu.Unlock()
	if len(batch) == 0 {
		return nil
	}
	rows := slices.SortedFunc(maps.Values(batch), func(a, b models.QueueFront) int { return cmp.Compare(a.TenantID, b.TenantID) })
	now := l.clock.Now().UTC()
	for i := range rows {
		rows[i].UpdatedAt = now
	}
	err := l.db.WithContext(ctx).Clauses(clause.OnConflict{
		Columns: []clause.Column{{Name: "tenant_id"}},
		DoUpdates: clause.Set{
			{Column: clause.Column{Name: "front"}, Value: gorm.Expr("CASE WHEN excluded.front > queue_fronts.front THEN excluded.front ELSE queue_fronts.front END")},
			{Column: clause.Column{Name: "trimmed_through"}, Value: gorm.Expr("CASE WHEN excluded.trimmed_through > queue_fronts.trimmed_through THEN excluded.trimmed_through ELSE queue_fronts.trimmed_through END")},
			{Column: clause.Column{Name: "updated_at"}, Value: gorm.Expr("excluded.updated_at")},
		},
	}).Create(&rows).Error
	if err != nil {
		l.log.Warn("consume: recording queue fronts failed; retrying", "tenants", len(rows), "err", err)
		l.mu.Lock()
		for _, r := range rows {
			l.pending[r.TenantID] = merge(r, l.pending[r.TenantID])
		}
		l.mu.Unlock()
	}
	return err
}

// Close writes the fronts recorded so far, stops the background loop and returns the error of
// that last write (the fronts it could not record are lost with the process: a rebuild then
// restores from the fronts recorded before).
func (l *TrimLog) Close() error {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	<-l.done
	return l.final
}
