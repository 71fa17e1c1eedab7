package held

// SetMarkPage makes Back read the marks n at a time.
func (s *Store) SetMarkPage(n int) { s.markPage = n }

// SetBetweenReads makes Back run fn between its reading of the batches and of the marks.
func (s *Store) SetBetweenReads(fn func()) { s.betweenReads = fn }
