package eventstore_test

import (
	"strings"
	"testing"
	"time"

	"github.com/eventq/eventq/internal/database"
	"github.com/eventq/eventq/internal/eventstore"
	"github.com/eventq/eventq/internal/testenv"
)

// On SQLite a prune step deletes the rows its subquery chose by their rowids. Driven from the
// (tenant_id, created_at) index instead, every step read all of the tenant's rows left before
// the cutoff, and a prune of a million events took 660 s instead of 28.
func TestSQLitePruneStepFindsItsRowsByRowid(t *testing.T) {
	db, _ := testenv.DB(t)
	if database.IsPostgres(db) {
		t.Skip("SQLite's plan; Postgres drops day partitions")
	}
	var plan []struct {
		Parent int
		Detail string
	}
	cutoff := time.Now().UTC()
	testenv.Must(t, db.Raw("EXPLAIN QUERY PLAN "+eventstore.New(db).PruneDelete(), 1, cutoff, 1, cutoff, 500).Scan(&plan).Error)
	for _, p := range plan {
		if p.Parent == 0 && strings.HasPrefix(p.Detail, "SEARCH tracked_events") {
			if !strings.Contains(p.Detail, "rowid=?") {
				t.Fatalf("the step's delete runs %q; want it by rowid (plan %+v)", p.Detail, plan)
			}
			return
		}
	}
	t.Fatalf("no search of tracked_events at the top of the plan: %+v", plan)
}
