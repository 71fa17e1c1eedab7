package database

// SetCountStep makes DropPartition count n rows per statement until the returned func runs.
func SetCountStep(n int) (restore func()) {
	old := countStep
	countStep = n
	return func() { countStep = old }
}
