//go:build !bench

package main

import (
	"errors"
	"time"

	"gorm.io/gorm"
)

// tagged is false: this bench was built without -tags bench, and its checkpoint scenario cannot
// swap SQLite's checkpoint loop (main refuses such a run before it starts).
const tagged = false

// checkpointEvery refuses: the checkpoint scenario swaps SQLite's checkpoint loop through a
// function compiled only with -tags bench (make bench builds so).
func checkpointEvery(*gorm.DB, time.Duration) error {
	return errors.New("the checkpoint scenario needs a bench built with -tags bench (make bench)")
}
