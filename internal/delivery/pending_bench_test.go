package delivery

import (
	"fmt"
	"testing"
	"time"

	"github.com/eventq/eventq/models"
	"github.com/google/uuid"
)

// BenchmarkPendingBatchInsert is what a commit builds besides its rows: the pending batches of
// its requests' tenants, for 20 requests of one tenant with 1 or 50
// events each, and for 1,000 one-event requests of as many tenants.
func BenchmarkPendingBatchInsert(b *testing.B) {
	for _, c := range []struct{ requests, events, tenants int }{{20, 1, 1}, {20, 50, 1}, {1000, 1, 1000}} {
		reqs := make([]*commitRequest, c.requests)
		for i := range reqs {
			reqs[i] = &commitRequest{tenant: uint64(7 + i%c.tenants), queued: true, rows: make([]models.TrackedEvent, c.events)}
			for j := range reqs[i].rows {
				reqs[i].rows[j] = models.TrackedEvent{ID: uuid.NewString(), CreatedAt: time.Now()}
			}
		}
		b.Run(fmt.Sprintf("%dx%d/tenants=%d", c.requests, c.events, c.tenants), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := newPendingBatches(reqs); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
