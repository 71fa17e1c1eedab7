//go:build bench

package main

import "github.com/eventq/eventq/internal/database"

// tagged is true: this bench was built with -tags bench.
const tagged = true

// checkpointEvery swaps the SQLite checkpoint loop, compiled only into a bench build.
var checkpointEvery = database.CheckpointEvery
