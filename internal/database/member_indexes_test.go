package database_test

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/eventq/eventq/internal/database"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/models"
)

// A database of the version before, with events over several days, migrates to the member and
// session indexes: every row is kept, on Postgres every partition (and one made later) has its
// share of both, and on SQLite a member's events in order are read through the member index.
func TestMigrateIndexesMembersAndSessions(t *testing.T) {
	db := openEmpty(t)
	testenv.Must(t, database.MigrateTo(db, "2026112702_erasures"))
	now := time.Now().UTC()
	for n := 1; n <= 12; n++ {
		ev := event(n, uint64(1+n%2), now.AddDate(0, 0, -n%4), true, false)
		testenv.Must(t, db.Create(&ev).Error)
	}
	want := allEvents(t, db)

	testenv.Must(t, database.Migrate(db))
	if got := allEvents(t, db); !reflect.DeepEqual(got, want) {
		t.Fatalf("rows changed by the migration:\n got %+v\nwant %+v", got, want)
	}
	for index, cols := range map[string]string{
		models.MemberIndex:  "(tenant_id, audience_member_id, created_at, id) WHERE (audience_member_id IS NOT NULL)",
		models.SessionIndex: "(tenant_id, session_id)",
	} {
		def := indexDef(t, db, index)
		if !strings.Contains(strings.ReplaceAll(def, "WHERE audience_member_id IS NOT NULL", "WHERE (audience_member_id IS NOT NULL)"), cols) {
			t.Errorf("%s is %q, want an index of %s", index, def, cols)
		}
		if !database.IsPostgres(db) {
			continue
		}
		if missing, valid := partitionsWithout(t, db, index); !valid || len(missing) > 0 {
			t.Errorf("%s valid %v, partitions without it %v", index, valid, missing)
		}
		later := now.AddDate(0, 0, 20)
		_, err := database.EnsurePartitions(context.Background(), db, later, later)
		testenv.Must(t, err)
		if missing, valid := partitionsWithout(t, db, index); !valid || len(missing) > 0 {
			t.Errorf("after a new partition, %s valid %v, partitions without it %v", index, valid, missing)
		}
	}
	if !database.IsPostgres(db) {
		var plan []struct{ Detail string }
		testenv.Must(t, db.Raw(`EXPLAIN QUERY PLAN SELECT id FROM tracked_events WHERE tenant_id = ? AND audience_member_id = ?
			AND created_at >= ? ORDER BY created_at, id LIMIT 10`, 1, "m", now).Scan(&plan).Error)
		if len(plan) == 0 || !strings.Contains(plan[0].Detail, models.MemberIndex) || strings.Contains(plan[len(plan)-1].Detail, "TEMP B-TREE") {
			t.Errorf("a member's page is read as %+v, want through %s with no sort", plan, models.MemberIndex)
		}
	}
	testenv.Must(t, database.Migrate(db)) // idempotent
}
