package delivery

import (
	"context"
	"testing"
	"time"

	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/models"
)

// heldEnv is an ingestEnv with its Held, whose Back the tests count with.
type heldEnv struct {
	*ingestEnv
	Held *Held
}

func startHeld(t *testing.T) *heldEnv {
	t.Helper()
	e := startIngest(t)
	return &heldEnv{e, e.Ingest.Held()}
}

func (e *heldEnv) mustBack(t *testing.T, tenant uint64) int64 {
	t.Helper()
	n, err := e.Held.Back(context.Background(), tenant)
	testenv.Must(t, err)
	return n
}

// Back counts the held events of a full queue exactly, however its readings are paged or
// interleaved with the settling of a batch. (The queue's statistics, which report the count,
// are tested in internal/consume.)
func TestBackIsExact(t *testing.T) {
	t.Run("counts marked events across pages, many committed at the same time", func(t *testing.T) {
		e := startHeld(t)
		e.Queue.MaxLength = 30
		e.Held.MarkPage = 7 // the 20 held events (one request: one created_at) in pages of 7, 7 and 6
		full := testenv.MustTenant(t, e.DB, true).ID
		e.mustIngest(t, full, 50)
		testenv.Eventually(t, 10*time.Second, "the held events are marked on their rows", func() bool {
			var marked int64
			testenv.Must(t, e.DB.Model(&models.TrackedEvent{}).Where("queue_pending").Count(&marked).Error)
			return marked == 20
		})
		if n := e.mustBack(t, full); n != 20 {
			t.Fatalf("a full queue, counted in pages of 7: %d held back, want 20", n)
		}
	})
	t.Run("a batch settled between the two readings is counted once", func(t *testing.T) {
		e := startHeld(t)
		e.Queue.MaxLength = 30
		// Back reads the tenant's pending batch, then, while the hook waits, the batch is
		// settled (deleted, its 20 held events marked), then Back reads the marks. A batch
		// settled before Back starts does not test this: another tenant tries again.
		for attempt := 1; ; attempt++ {
			full := testenv.MustTenant(t, e.DB, true).ID
			e.mustIngest(t, full, 50)
			caught := false
			n, err := e.Held.BackAround(context.Background(), full, func() {
				var batches int64
				testenv.Must(t, e.DB.Model(&models.PendingBatch{}).Where("tenant_id = ?", full).Count(&batches).Error)
				if caught = batches > 0; !caught {
					return
				}
				testenv.Eventually(t, 10*time.Second, "the batch is settled", func() bool {
					var marked int64
					testenv.Must(t, e.DB.Model(&models.PendingBatch{}).Where("tenant_id = ?", full).Count(&batches).Error)
					testenv.Must(t, e.DB.Model(&models.TrackedEvent{}).Where("queue_pending AND tenant_id = ?", full).Count(&marked).Error)
					return batches == 0 && marked == 20
				})
			})
			testenv.Must(t, err)
			if !caught {
				if attempt == 20 {
					t.Fatal("20 batches were settled before Back read them")
				}
				continue
			}
			if n != 20 {
				t.Fatalf("a full queue whose batch was settled while Back ran: %d held back, want 20", n)
			}
			return
		}
	})
}
