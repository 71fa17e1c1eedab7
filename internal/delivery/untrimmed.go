package delivery

import (
	"context"

	"github.com/eventq/eventq/models"
)

// MarkUntrimmed marks pending every stored event of tenant that was queued after front (the
// trim log's record of the queue's front), and counts them: what a rebuild puts back.
func (s *Held) MarkUntrimmed(ctx context.Context, tenant uint64, front models.QueueFront) (int64, error) {
	return s.Events.Pool(ctx).MarkUntrimmed(tenant, front)
}
