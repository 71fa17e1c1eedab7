package delivery

// SetMarkPage makes Back read the marks n at a time.
func (s *Held) SetMarkPage(n int) { s.markPage = n }

// SetBetweenReads makes Back run fn between its reading of the batches and of the marks.
func (s *Held) SetBetweenReads(fn func()) { s.betweenReads = fn }
