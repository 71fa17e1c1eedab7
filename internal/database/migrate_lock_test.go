package database_test

import (
	"sync"
	"testing"

	"gorm.io/gorm"

	"github.com/eventq/eventq/internal/database"
	"github.com/eventq/eventq/internal/testenv"
)

// Migrations started at once by several processes (here: separate connection pools, each
// like an `eventq migrate` of its own) on one new database all succeed, one after the other:
// every migration is applied and recorded once. Without the lock they apply the same
// migration side by side and all but one fail (a table that already exists, an id recorded
// twice).
func TestConcurrentMigrationsTakeTurns(t *testing.T) {
	url := testenv.EmptyDatabaseURL(t)
	const migrators = 4
	dbs := make([]*gorm.DB, migrators)
	for i := range dbs {
		db, err := database.Open(url)
		testenv.Must(t, err)
		t.Cleanup(func() { database.Close(db) })
		dbs[i] = db
	}
	errs := make([]error, migrators)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, db := range dbs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs[i] = database.Migrate(db)
		}()
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("migrator %d: %v", i, err)
		}
	}

	var ids []string
	testenv.Must(t, dbs[0].Raw("SELECT id FROM migrations ORDER BY id").Scan(&ids).Error)
	seen := map[string]bool{}
	for _, id := range ids {
		if seen[id] {
			t.Errorf("migration %s recorded twice", id)
		}
		seen[id] = true
	}
	if len(seen) == 0 {
		t.Fatal("no migration recorded")
	}
	// One more run, after the others, has nothing left to do and succeeds.
	testenv.Must(t, database.Migrate(dbs[0]))
	var after int
	testenv.Must(t, dbs[0].Raw("SELECT COUNT(*) FROM migrations").Scan(&after).Error)
	if after != len(ids) {
		t.Errorf("%d migrations recorded after another run, %d before", after, len(ids))
	}
}
