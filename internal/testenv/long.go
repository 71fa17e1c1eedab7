package testenv

import "os"

// Long reports whether the long runs of the suite's property tests were asked for
// (EVENTQ_TEST_LONG set, as `make chaos` does): more random sequences, every size instead of a
// sample. `make test` runs them short.
func Long() bool { return os.Getenv("EVENTQ_TEST_LONG") != "" }
