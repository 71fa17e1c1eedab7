package delivery

import "context"

// BackAround is Back with between run between its reading of the batches and of the marks,
// where a batch may be settled.
func (s *Held) BackAround(ctx context.Context, tenantID uint64, between func()) (int64, error) {
	inBatches, counted, err := s.inBatches(ctx, tenantID)
	if err != nil {
		return 0, err
	}
	between()
	marked, err := s.marked(ctx, tenantID, counted)
	if err != nil {
		return 0, err
	}
	return inBatches + marked, nil
}
