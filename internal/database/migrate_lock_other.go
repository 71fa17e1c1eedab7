//go:build !unix

package database

import "os"

// lockFile does nothing where flock is missing: SQLite migrations of one file from several
// processes at once are not kept apart there.
func lockFile(*os.File) error { return nil }
