package database_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/eventq/eventq/internal/database"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/models"
)

// The last migration of the version before every key carried tenant_id.
const beforeTenantKeys = "2026112704_drop_member_indexes"

// The tables of one tenant, and those whose integer id SQLite numbers as the rowid.
var (
	tenantTables   = []string{"audience_members", "products", "purchases", "entitlements", "member_erasures", "pending_batches", "queue_fronts", "tracked_events"}
	numberedTables = []string{"audience_members", "products", "purchases", "entitlements", "member_erasures"}
)

// A database the previous version made, with rows of two tenants in every tenant table,
// migrates with every row kept, and then every primary key and unique index of a tenant's
// table includes tenant_id. A checkout session is unique within its tenant. On Citus the
// tenant tables are distributed by tenant_id, all in one co-location group, with their rows,
// and the shared ones are reference tables.
func TestTenantKeysMigrationKeepsEveryRow(t *testing.T) {
	db := openEmpty(t)
	testenv.Must(t, database.MigrateTo(db, beforeTenantKeys))
	now := time.Now().UTC().Truncate(time.Second)
	for tenant := uint64(1); tenant <= 2; tenant++ {
		seedShop(t, db, tenant)
		testenv.Must(t, db.Create(&models.Entitlement{TenantID: tenant, AudienceMemberID: tenant, ProductID: tenant, PurchaseID: tenant}).Error)
		testenv.Must(t, db.Create(&models.MemberErasure{TenantID: tenant, MemberID: tenant, Status: models.ErasureDone, RequestedAt: now}).Error)
		testenv.Must(t, db.Create(&models.PendingBatch{ID: fmt.Sprint("batch-", tenant), TenantID: tenant, EventIDs: "e", FirstAt: now, LastAt: now, CreatedAt: now}).Error)
		testenv.Must(t, db.Create(&models.QueueFront{TenantID: tenant, Front: 3, TrimmedThrough: "e"}).Error)
		for n := 0; n < 3; n++ {
			testenv.Must(t, db.Create(ptr(event(int(tenant)*10+n, tenant, now.Add(-time.Duration(n)*24*time.Hour), true, false))).Error)
		}
	}
	before := rowCounts(t, db)

	testenv.Must(t, database.Migrate(db))
	testenv.Must(t, database.Migrate(db)) // idempotent

	if after := rowCounts(t, db); !slices.Equal(after, before) {
		t.Fatalf("rows per table after migrating %v, want %v", after, before)
	}
	for _, table := range tenantTables {
		for _, key := range uniqueKeys(t, db, table) {
			if !slices.Contains(key, "tenant_id") {
				t.Errorf("%s has a key %v without tenant_id", table, key)
			}
		}
	}
	// Each tenant's copy of a checkout session is its own; twice in one tenant is refused.
	testenv.Must(t, db.Create(&models.Purchase{TenantID: 2, AudienceMemberID: 2, ProductID: 2, PSPCheckoutSessionID: "cs_1", AmountTotal: 1, Currency: "usd"}).Error)
	if err := db.Create(&models.Purchase{TenantID: 1, AudienceMemberID: 1, ProductID: 1, PSPCheckoutSessionID: "cs_1", AmountTotal: 1, Currency: "usd"}).Error; !database.UniqueViolation(err) {
		t.Errorf("a second purchase of cs_1 in tenant 1: %v, want a unique violation", err)
	}
	// New rows are numbered after the old ones.
	m := models.AudienceMember{TenantID: 1, Email: "b@example.com"}
	testenv.Must(t, db.Create(&m).Error)
	if m.ID != 3 {
		t.Errorf("a new member got id %d, want 3", m.ID)
	}
	if citus, err := database.IsCitus(db); err != nil || !citus {
		testenv.Must(t, err)
		if levels, err := database.WALLevels(db); err != nil || levels != nil {
			t.Errorf("wal levels of a database without Citus: %v, %v", levels, err)
		}
		return
	}
	checkDistributed(t, db)
	// The test cluster runs as the docs say it must: every node, coordinator included, with
	// wal_level = logical, which eventq migrate checks.
	levels, err := database.WALLevels(db)
	testenv.Must(t, err)
	t.Logf("wal levels: %v", levels)
	if len(levels) < 3 {
		t.Errorf("wal levels of %d nodes, want the coordinator's and the workers': %v", len(levels), levels)
	}
	if bad, err := database.NodesWithoutLogicalWAL(db); err != nil || len(bad) > 0 {
		t.Errorf("nodes without logical WAL: %v, %v (all: %v)", bad, err, levels)
	}
}

// checkDistributed checks Citus's catalogue: the tenant tables distributed by tenant_id in
// one co-location group, the shared tables reference tables.
func checkDistributed(t *testing.T, db *gorm.DB) {
	t.Helper()
	var tables []struct {
		TableName          string
		CitusTableType     string
		DistributionColumn string
		ColocationID       int
	}
	testenv.Must(t, db.Raw(`SELECT table_name::text, citus_table_type, distribution_column, colocation_id FROM citus_tables`).Scan(&tables).Error)
	byName := map[string]int{}
	for i, tb := range tables {
		byName[tb.TableName] = i
	}
	group := -1
	for _, name := range tenantTables {
		i, ok := byName[name]
		if !ok {
			t.Errorf("%s is not distributed", name)
			continue
		}
		tb := tables[i]
		if tb.CitusTableType != "distributed" || tb.DistributionColumn != "tenant_id" {
			t.Errorf("%s: %s by %s, want distributed by tenant_id", name, tb.CitusTableType, tb.DistributionColumn)
		}
		if group == -1 {
			group = tb.ColocationID
		} else if tb.ColocationID != group {
			t.Errorf("%s in co-location group %d, want %d with audience_members", name, tb.ColocationID, group)
		}
	}
	for _, name := range []string{"tenants", "personal_access_tokens", "features", "purchase_reversals"} {
		if i, ok := byName[name]; !ok || tables[i].CitusTableType != "reference" {
			t.Errorf("%s is not a reference table", name)
		}
	}
	if _, ok := byName["webhook_inbox"]; ok {
		t.Error("webhook_inbox is distributed; it stays on the coordinator")
	}
}

// In the Citus suite, a statement of a program's session that touches several tenants'
// shards is refused (testenv.RoutedOnly), one naming its tenant is not, and AcrossTenants
// lets a transaction's statements touch every tenant. Elsewhere AcrossTenants just runs.
func TestAcrossTenants(t *testing.T) {
	db, url := testenv.DB(t)
	guarded, err := database.Open(url)
	testenv.Must(t, err)
	defer database.Close(guarded)
	for tenant := uint64(1); tenant <= 3; tenant++ {
		testenv.Must(t, db.Create(&models.AudienceMember{TenantID: tenant, Email: "a@example.com"}).Error)
	}
	var n int64
	err = guarded.Raw("SELECT count(*) FROM audience_members").Scan(&n).Error
	if testenv.Backend() == "citus" {
		if err == nil || !strings.Contains(err.Error(), "multi-task query") {
			t.Fatalf("a count over every tenant on a guarded session: %v, want refused", err)
		}
	} else {
		testenv.Must(t, err)
	}
	testenv.Must(t, guarded.Raw("SELECT count(*) FROM audience_members WHERE tenant_id = 2").Scan(&n).Error)
	if n != 1 {
		t.Fatalf("tenant 2 has %d members, want 1", n)
	}
	testenv.Must(t, database.AcrossTenants(guarded, func(tx *gorm.DB) error {
		return tx.Raw("SELECT count(*) FROM audience_members").Scan(&n).Error
	}))
	if n != 3 {
		t.Fatalf("%d members across tenants, want 3", n)
	}
}

func ptr[T any](v T) *T { return &v }

// seedShop stores tenant number tenant (the next id) with a member, a product and a purchase,
// each its tenant's first.
func seedShop(t *testing.T, db *gorm.DB, tenant uint64) {
	t.Helper()
	testenv.Must(t, db.Create(&models.Tenant{Name: fmt.Sprint(tenant), SiteKey: fmt.Sprint("site_", tenant)}).Error)
	testenv.Must(t, db.Create(&models.AudienceMember{TenantID: tenant, Email: "a@example.com"}).Error)
	testenv.Must(t, db.Create(&models.Product{TenantID: tenant, Name: "Course", Amount: 100, Currency: "usd", Active: true}).Error)
	testenv.Must(t, db.Create(&models.Purchase{TenantID: tenant, AudienceMemberID: tenant, ProductID: tenant,
		PSPCheckoutSessionID: fmt.Sprint("cs_", tenant), AmountTotal: 100, Currency: "usd", Status: models.PurchasePaid}).Error)
}

// rowCounts counts the rows of every tenant table, in tenantTables' order.
func rowCounts(t *testing.T, db *gorm.DB) []int64 {
	t.Helper()
	out := make([]int64, len(tenantTables))
	for i, table := range tenantTables {
		testenv.Must(t, db.Table(table).Count(&out[i]).Error)
	}
	return out
}

// uniqueKeys lists the column sets of table's primary key and unique indexes. SQLite's rowid
// key of the tables it numbers is left out: (tenant_id, id) is a unique index beside it.
func uniqueKeys(t *testing.T, db *gorm.DB, table string) [][]string {
	t.Helper()
	var keys [][]string
	if database.IsPostgres(db) {
		var rows []struct{ Cols string }
		testenv.Must(t, db.Raw(`SELECT string_agg(a.attname, ',' ORDER BY a.attname) AS cols FROM pg_index i
			JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
			WHERE i.indrelid = ?::regclass AND i.indisunique GROUP BY i.indexrelid`, table).Scan(&rows).Error)
		for _, r := range rows {
			keys = append(keys, strings.Split(r.Cols, ","))
		}
		return keys
	}
	var indexes []struct {
		Name   string
		Unique int
	}
	testenv.Must(t, db.Raw("SELECT name, \"unique\" FROM pragma_index_list(?)", table).Scan(&indexes).Error)
	for _, ix := range indexes {
		if ix.Unique == 0 {
			continue
		}
		var cols []string
		testenv.Must(t, db.Raw("SELECT name FROM pragma_index_info(?)", ix.Name).Scan(&cols).Error)
		keys = append(keys, cols)
	}
	var pk []string
	testenv.Must(t, db.Raw("SELECT name FROM pragma_table_info(?) WHERE pk > 0 ORDER BY pk", table).Scan(&pk).Error)
	if len(pk) > 0 && !(slices.Equal(pk, []string{"id"}) && slices.Contains(numberedTables, table)) {
		keys = append(keys, pk)
	}
	return keys
}
