package database

import (
	"errors"
	"fmt"
	"strings"

	"gorm.io/gorm"
)

// On a Citus cluster (a Postgres coordinator with the citus extension and worker nodes), each
// tenant's rows live on one worker node: the tenant tables are distributed by tenant_id, all
// co-located, so that everything one tenant's work reads or writes is on the node a query
// naming its tenant_id is routed to. The tables every tenant shares are reference tables,
// copied to every node, because per-tenant statements join them (a fulfilment reads the
// tenant and any reversal waiting for its payment). The webhook inbox, the reconciliation
// marks and the migrations' own table are joined by nothing and stay on the coordinator.

// referenceTables are the shared tables a tenant's statements join.
var referenceTables = []string{"tenants", "personal_access_tokens", "features", "purchase_reversals"}

// ErrNoWorkers is distribute's refusal on a Citus coordinator that has no worker node yet.
var ErrNoWorkers = errors.New("the citus extension is installed but no worker node is registered: add them on the coordinator (SELECT citus_add_node(host, port)), then migrate again")

// IsCitus reports whether db is a Citus coordinator: a Postgres database with the citus
// extension created in it.
func IsCitus(db *gorm.DB) (bool, error) {
	if !IsPostgres(db) {
		return false, nil
	}
	var citus bool
	err := db.Raw("SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')").Scan(&citus).Error
	return citus, err
}

// distribute makes, on a Citus coordinator, the tenant tables distributed by tenant_id and
// the shared ones reference tables; tables already made so are left as they are, so it runs
// on every migrate. Rows already in a table (a database restored onto the coordinator) are
// copied onto the nodes, and the coordinator's local copy is emptied. On any other database
// it does nothing.
func distribute(db *gorm.DB) error {
	if citus, err := IsCitus(db); err != nil || !citus {
		return err
	}
	var workers int64
	if err := db.Raw(`SELECT count(*) FROM pg_dist_node WHERE groupid <> 0 AND isactive AND noderole = 'primary'`).Scan(&workers).Error; err != nil {
		return err
	}
	if workers == 0 {
		return ErrNoWorkers
	}
	var names []string
	if err := db.Raw("SELECT logicalrelid::regclass::text FROM pg_dist_partition").Scan(&names).Error; err != nil {
		return err
	}
	done := make(map[string]bool, len(names))
	for _, n := range names {
		done[n] = true
	}
	for _, t := range referenceTables {
		if !done[t] {
			if err := distributeOne(db, t, "SELECT create_reference_table(?)", t); err != nil {
				return err
			}
		}
	}
	for _, t := range tenantTables {
		if !done[t] {
			// The first is the group every other one is co-located with.
			if err := distributeOne(db, t, "SELECT create_distributed_table(?, 'tenant_id', colocate_with => ?)", t, colocateWith(t)); err != nil {
				return err
			}
		}
	}
	return nil
}

// colocateWith is the table t is co-located with: the first tenant table's group, which that
// table itself starts.
func colocateWith(t string) string {
	if t == tenantTables[0] {
		return "none"
	}
	return tenantTables[0]
}

// distributeOne runs one of Citus's functions that distribute table t, then empties the
// coordinator's local copy of rows the function copied onto the nodes.
func distributeOne(db *gorm.DB, t, query string, args ...any) error {
	if err := db.Exec(query, args...).Error; err != nil {
		return fmt.Errorf("distribute %s: %w", t, err)
	}
	if err := db.Exec("SELECT truncate_local_data_after_distributing_table(?)", t).Error; err != nil {
		return fmt.Errorf("distribute %s: empty the coordinator's copy: %w", t, err)
	}
	return nil
}

// AcrossTenants runs fn, whose statements read or write the rows of many tenants (the work
// over every tenant: retention, the re-pusher's pass, the spool's drain), in a transaction
// that says so to Citus: on a coordinator whose sessions refuse statements that touch several
// tenants' shards (citus.multi_task_query_log_level, with which the tests run), these are
// allowed. fn's tx is db inside that transaction. On Postgres without Citus the setting is
// an unused placeholder; on SQLite fn runs on db as it is.
func AcrossTenants(db *gorm.DB, fn func(tx *gorm.DB) error) error {
	if !IsPostgres(db) {
		return fn(db)
	}
	return db.Transaction(func(tx *gorm.DB) error {
		if err := tx.Exec(acrossTenants).Error; err != nil {
			return err
		}
		return fn(tx)
	})
}

// acrossTenants is the statement by which a transaction's statements may touch every
// tenant's shards (AcrossTenants).
const acrossTenants = "SET LOCAL citus.multi_task_query_log_level = 'off'"

// NodesWithoutLogicalWAL names the nodes of a Citus cluster (coordinator included) whose
// wal_level is not logical, as host:port=level. Citus's rebalancer moves shards by logical
// replication: on such a cluster citus_rebalance_start() never finishes. On any other database
// it names none.
func NodesWithoutLogicalWAL(db *gorm.DB) ([]string, error) {
	levels, err := WALLevels(db)
	var out []string
	for _, l := range levels {
		if !strings.HasSuffix(l, "=logical") {
			out = append(out, l)
		}
	}
	return out, err
}

// WALLevels is every node of a Citus cluster with its wal_level, as host:port=level (a node
// that did not answer: host:port=its error), in node order; nil on any other database.
func WALLevels(db *gorm.DB) ([]string, error) {
	if citus, err := IsCitus(db); err != nil || !citus {
		return nil, err
	}
	var rows []struct {
		Node, Result string
	}
	err := db.Raw(`SELECT n.nodename || ':' || n.nodeport AS node, r.result
		FROM run_command_on_all_nodes('SHOW wal_level') r JOIN pg_dist_node n USING (nodeid)
		ORDER BY n.nodeid`).Scan(&rows).Error
	if err != nil {
		return nil, err
	}
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = r.Node + "=" + r.Result
	}
	return out, nil
}
