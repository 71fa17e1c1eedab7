//go:build bench

package main

import "github.com/eventq/eventq/internal/database"

// checkpointEvery swaps the SQLite checkpoint loop, compiled only into a bench build.
var checkpointEvery = database.CheckpointEvery
