package database_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/eventq/eventq/internal/database"
	"github.com/eventq/eventq/internal/testenv"
)

// The member and session indexes a database got from 2026112703_member_indexes (on Postgres on
// every partition) are dropped by the next migration, with every row kept; a database made
// afterwards has none either.
func TestMemberIndexesAreDroppedAgain(t *testing.T) {
	db := openEmpty(t)
	testenv.Must(t, database.MigrateTo(db, "2026112702_erasures"))
	now := time.Now().UTC()
	for n := 1; n <= 12; n++ {
		ev := event(n, uint64(1+n%2), now.AddDate(0, 0, -n%4), true, false)
		testenv.Must(t, db.Create(&ev).Error)
	}
	want := allEvents(t, db)
	indexes := []string{"idx_tracked_events_member", "idx_tracked_events_session"}

	testenv.Must(t, database.MigrateTo(db, "2026112703_member_indexes"))
	for _, index := range indexes {
		if indexDef(t, db, index) == "" {
			t.Fatalf("2026112703 made no %s", index)
		}
		if database.IsPostgres(db) {
			if missing, valid := partitionsWithout(t, db, index); !valid || len(missing) > 0 {
				t.Fatalf("%s valid %v, partitions without it %v", index, valid, missing)
			}
		}
	}
	testenv.Must(t, database.Migrate(db))
	for _, index := range indexes {
		if def := indexDef(t, db, index); def != "" {
			t.Errorf("%s still there: %s", index, def)
		}
	}
	if got := allEvents(t, db); !reflect.DeepEqual(got, want) {
		t.Fatalf("rows changed by the migrations:\n got %+v\nwant %+v", got, want)
	}
	testenv.Must(t, database.Migrate(db)) // idempotent
}
