package database

import (
	"fmt"
	"strings"

	"gorm.io/gorm"
)

// The tables that belong to one tenant, each with a tenant_id column: on Citus they are
// distributed by it (distribute), and every key of theirs includes it.
var tenantTables = []string{
	"audience_members", "products", "purchases", "entitlements", "member_erasures",
	"pending_batches", "queue_fronts", EventsTable,
}

// numberedTables are the tenant tables whose integer id the database assigns.
var numberedTables = []string{"audience_members", "products", "purchases", "entitlements", "member_erasures"}

// The unique keys that named a row across tenants, and the ones that replace them.
var tenantUniques = []struct{ table, old, name, columns string }{
	{"purchases", "idx_purchases_psp_checkout_session_id", "purchases_tenant_checkout_session", "tenant_id, psp_checkout_session_id"},
	{"entitlements", "idx_entitlements_purchase_id", "entitlements_tenant_purchase", "tenant_id, purchase_id"},
}

// tenantKeys makes every key of a tenant's table start with tenant_id, keeping every row: the
// form Citus needs of a table distributed by tenant_id, and one schema on every database.
//
// On Postgres the primary keys become (tenant_id, id), and (tenant_id, id, created_at) for the
// partitioned tracked_events; the indexes of tenant_id alone, which the new keys cover, go.
// On SQLite a table's integer id stays its rowid, the one way SQLite numbers rows, and
// (tenant_id, id) is a unique index beside it; tracked_events and pending_batches, whose ids
// are text, are rebuilt with the new primary key. Both databases get the same unique keys of
// a purchase's checkout session and an entitlement's purchase, now within the tenant.
func tenantKeys(tx *gorm.DB) error {
	return tx.Transaction(func(tx *gorm.DB) error {
		var stmts []string
		for _, u := range tenantUniques {
			stmts = append(stmts, "DROP INDEX IF EXISTS "+u.old,
				fmt.Sprintf("CREATE UNIQUE INDEX IF NOT EXISTS %s ON %s (%s)", u.name, u.table, u.columns))
		}
		for _, t := range []string{"products", "purchases", "entitlements", "pending_batches"} {
			stmts = append(stmts, "DROP INDEX IF EXISTS idx_"+t+"_tenant_id")
		}
		stmts = append(stmts, "DROP INDEX IF EXISTS audience_members_tenant_id_id")
		if IsPostgres(tx) {
			for _, t := range append(numberedTables, "pending_batches") {
				stmts = append(stmts, fmt.Sprintf("ALTER TABLE %s DROP CONSTRAINT %s_pkey, ADD CONSTRAINT %[2]s_pkey PRIMARY KEY (tenant_id, id)", t, t))
			}
			stmts = append(stmts, fmt.Sprintf("ALTER TABLE %s DROP CONSTRAINT %[1]s_pkey, ADD CONSTRAINT %[1]s_pkey PRIMARY KEY (tenant_id, id, created_at)", EventsTable))
			return execAll(tx, stmts...)
		}
		for _, t := range numberedTables {
			stmts = append(stmts, fmt.Sprintf("CREATE UNIQUE INDEX IF NOT EXISTS %s_tenant_key ON %[1]s (tenant_id, id)", t))
		}
		if err := execAll(tx, stmts...); err != nil {
			return err
		}
		for _, t := range []string{EventsTable, "pending_batches"} {
			if err := rekeySQLite(tx, t, "PRIMARY KEY (`id`)", "PRIMARY KEY (`tenant_id`,`id`)"); err != nil {
				return fmt.Errorf("%s: %w", t, err)
			}
		}
		return nil
	})
}

// rekeySQLite rebuilds SQLite table t with its primary key clause from replaced by to (SQLite
// cannot change a primary key in place): the table is renamed, made again under its name with
// the same columns, filled from the old one, which is dropped, and given its indexes again.
func rekeySQLite(tx *gorm.DB, t, from, to string) error {
	var create string
	if err := tx.Raw("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", t).Scan(&create).Error; err != nil {
		return err
	}
	if !strings.Contains(create, from) {
		return fmt.Errorf("no %s in %q", from, create)
	}
	var indexes []string
	if err := tx.Raw("SELECT sql FROM sqlite_master WHERE type = 'index' AND tbl_name = ? AND sql IS NOT NULL", t).Scan(&indexes).Error; err != nil {
		return err
	}
	old := t + "_rekeyed"
	stmts := []string{
		fmt.Sprintf("ALTER TABLE %s RENAME TO %s", t, old),
		strings.Replace(create, from, to, 1),
		fmt.Sprintf("INSERT INTO %s SELECT * FROM %s", t, old),
		"DROP TABLE " + old,
	}
	return execAll(tx, append(stmts, indexes...)...)
}
