//go:build race

package export

// raceDetector reports whether the tests run with -race.
const raceDetector = true
