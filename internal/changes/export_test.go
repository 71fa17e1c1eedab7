package changes

// Waiting is how many announcements wait for the one being sent.
func (f *Feed) Waiting() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.waiting)
}
