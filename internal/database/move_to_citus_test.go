package database_test

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/eventq/eventq/internal/database"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/models"
)

// The move docs/scaling.md gives an operator, rehearsed with rows: a database in use on one
// Postgres server is dumped (pg_dump), restored onto a Citus coordinator (psql) and migrated
// (`eventq migrate`); every row is kept, the tables are distributed, and the service goes on
// writing (a new member gets the next id). Citus suite only.
func TestMoveOntoCitusKeepsEveryRow(t *testing.T) {
	if testenv.Backend() != "citus" {
		t.Skip("moves a database onto the Citus suite's cluster")
	}
	bin, err := testenv.PostgresBin()
	testenv.Must(t, err)
	src, err := testenv.StartPostgres()
	testenv.Must(t, err)
	defer src.Stop()
	srcURL, err := src.CreateDatabase("single")
	testenv.Must(t, err)
	single, err := database.Open(srcURL)
	testenv.Must(t, err)
	defer database.Close(single)
	testenv.Must(t, database.Migrate(single))
	now := time.Now().UTC().Truncate(time.Second)
	for tenant := uint64(1); tenant <= 3; tenant++ {
		seedShop(t, single, tenant)
		for n := 0; n < 20; n++ { // over three days
			testenv.Must(t, single.Create(ptr(event(int(tenant)*100+n, tenant, now.Add(-time.Duration(n%3)*24*time.Hour), true, false))).Error)
		}
	}
	before := rowCounts(t, single)

	dstURL := testenv.EmptyDatabaseURL(t) // the extension on every node, the workers registered
	dump := exec.Command("sh", "-c", fmt.Sprintf("%s --no-owner --no-privileges %q | %s -X -q -v ON_ERROR_STOP=1 %q",
		tool(bin, "pg_dump"), srcURL, tool(bin, "psql"), dstURL))
	if out, err := dump.CombinedOutput(); err != nil {
		t.Fatalf("pg_dump | psql: %v\n%s", err, out)
	}
	dst, err := database.Open(dstURL)
	testenv.Must(t, err)
	defer database.Close(dst)
	testenv.Must(t, database.Migrate(dst))

	if after := rowCounts(t, dst); !slices.Equal(after, before) {
		t.Fatalf("rows per table on Citus %v, want %v as on the single server", after, before)
	}
	checkDistributed(t, dst)
	var onCoordinator int64 // the local copies emptied: the rows are on the worker nodes
	testenv.Must(t, dst.Raw(`SELECT pg_relation_size('audience_members') + pg_relation_size('purchases')`).Scan(&onCoordinator).Error)
	if onCoordinator != 0 {
		t.Errorf("the coordinator's local tables hold %d bytes, want 0", onCoordinator)
	}
	m := models.AudienceMember{TenantID: 2, Email: "b@example.com"}
	testenv.Must(t, dst.Create(&m).Error)
	if m.ID != 4 {
		t.Errorf("a new member got id %d, want 4", m.ID)
	}
}

// tool is the path of Postgres's client program name: on PATH, or beside the server's.
func tool(bin, name string) string {
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	return filepath.Join(bin, name)
}
