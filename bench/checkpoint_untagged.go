//go:build !bench

package main

import (
	"errors"
	"time"

	"gorm.io/gorm"
)

// checkpointEvery refuses: the checkpoint scenario swaps SQLite's checkpoint loop through a
// function compiled only with -tags bench (make bench builds so).
func checkpointEvery(*gorm.DB, time.Duration) error {
	return errors.New("the checkpoint scenario needs a bench built with -tags bench (make bench)")
}
