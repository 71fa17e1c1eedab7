//go:build bench

package database

import (
	"errors"
	"time"

	"gorm.io/gorm"
)

// CheckpointEvery replaces the checkpoint loop of db, an SQLite database from Open, with one
// that checkpoints every d whether the log is busy or idle, or with the usual loop when d is
// 0. The bench uses it to run earlier versions' fixed-interval loop as the baseline beside the
// current one.
func CheckpointEvery(db *gorm.DB, d time.Duration) error {
	sqlDB, err := db.DB()
	if err != nil {
		return err
	}
	v, ok := checkpointers.Load(sqlDB)
	if !ok {
		return errors.New("database: no checkpoint loop (not an SQLite database from Open)")
	}
	stopCheckpoints(sqlDB)
	if d == 0 {
		startCheckpoints(sqlDB, v.(checkpointer).path, checkpointInterval, idleCheckpointInterval)
	} else {
		startCheckpoints(sqlDB, v.(checkpointer).path, d, d)
	}
	return nil
}
