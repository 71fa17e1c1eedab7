//go:build race

package routes

// raceEnabled is true under the race detector, which makes compressing ten times slower.
const raceEnabled = true
