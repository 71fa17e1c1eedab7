package database_test

import (
	"strings"
	"testing"
	"time"

	"github.com/eventq/eventq/internal/database"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/models"
)

// The last migration of the version before the HTTP front door.
const beforeFrontDoor = "2026112602_pending_index"

// A database the previous version made, with tenants (one on a connected account, one with an
// empty one), members sharing an address and products, migrates with every row kept: products
// stay on sale, lists are empty, external ids unset, and an address may now repeat while an
// external id may not.
func TestFrontDoorMigrationKeepsEveryRow(t *testing.T) {
	db := openEmpty(t)
	testenv.Must(t, database.MigrateTo(db, beforeFrontDoor))
	now := time.Now().UTC().Truncate(time.Second)
	// Raw inserts: the current models have columns the previous version's tables lack.
	testenv.Must(t, db.Exec(`INSERT INTO tenants (name, site_key, psp_account_id, created_at, updated_at) VALUES
		('Acme', 'site_a', 'acct_a', ?, ?), ('Blank', 'site_b', '', ?, ?), ('None', 'site_c', NULL, ?, ?)`, now, now, now, now, now, now).Error)
	testenv.Must(t, db.Exec(`INSERT INTO audience_members (tenant_id, email, name, created_at, updated_at) VALUES
		(1, 'ada@example.com', 'Ada', ?, ?), (2, 'ada@example.com', '', ?, ?)`, now, now, now, now).Error)
	testenv.Must(t, db.Exec(`INSERT INTO products (tenant_id, name, amount, currency, created_at, updated_at) VALUES
		(1, 'Course', 1999, 'usd', ?, ?)`, now, now).Error)

	testenv.Must(t, database.Migrate(db))
	testenv.Must(t, database.Migrate(db)) // idempotent

	var tenants []models.Tenant
	testenv.Must(t, db.Order("id").Find(&tenants).Error)
	if len(tenants) != 3 || tenants[0].Account() != "acct_a" || tenants[1].PSPAccountID != nil || tenants[2].PSPAccountID != nil ||
		tenants[0].SiteKey != "site_a" || len(tenants[0].AllowedHostnames) != 0 || tenants[0].AllowedHostnames == nil || len(tenants[1].RedactQueryParams) != 0 {
		t.Fatalf("tenants after migrating: %+v", tenants)
	}
	var members []models.AudienceMember
	testenv.Must(t, db.Order("id").Find(&members).Error)
	if len(members) != 2 || members[0].Name != "Ada" || members[0].ExternalID != nil || members[0].Email != "ada@example.com" {
		t.Fatalf("members after migrating: %+v", members)
	}
	var p models.Product
	testenv.Must(t, db.Take(&p, 1).Error)
	if !p.Active || p.Amount != 1999 || p.Name != "Course" {
		t.Fatalf("product after migrating: %+v", p)
	}

	// The new rules hold in the migrated schema.
	ext := "u-1"
	testenv.Must(t, db.Create(&models.AudienceMember{TenantID: 1, Email: "ada@example.com", ExternalID: &ext}).Error)
	if err := db.Create(&models.AudienceMember{TenantID: 1, Email: "bob@example.com", ExternalID: &ext}).Error; !database.UniqueViolation(err) {
		t.Fatalf("a second external id u-1 in one tenant: %v, want a unique violation", err)
	}
	testenv.Must(t, db.Create(&models.AudienceMember{TenantID: 2, Email: "bob@example.com", ExternalID: &ext}).Error)
	acct := "acct_a"
	if err := db.Create(&models.Tenant{Name: "Copy", SiteKey: "site_d", PSPAccountID: &acct}).Error; !database.UniqueViolation(err) {
		t.Fatalf("a second tenant on acct_a: %v, want a unique violation", err)
	}
}

// Two tenants on one connected account (which nothing prevented before) stop the migration
// with a message naming the account, and nothing is changed.
func TestFrontDoorMigrationNamesSharedAccounts(t *testing.T) {
	db := openEmpty(t)
	testenv.Must(t, database.MigrateTo(db, beforeFrontDoor))
	now := time.Now().UTC()
	testenv.Must(t, db.Exec(`INSERT INTO tenants (name, site_key, psp_account_id, created_at, updated_at) VALUES
		('A', 'site_a', 'acct_shared', ?, ?), ('B', 'site_b', 'acct_shared', ?, ?)`, now, now, now, now).Error)
	err := database.Migrate(db)
	if err == nil || !strings.Contains(err.Error(), "acct_shared (2 tenants)") {
		t.Fatalf("migrate: %v, want an error naming acct_shared", err)
	}
	if db.Migrator().HasColumn(&models.Product{}, "active") {
		t.Fatal("the refused migration changed the schema")
	}
	testenv.Must(t, db.Exec(`UPDATE tenants SET psp_account_id = 'acct_other' WHERE name = 'B'`).Error)
	testenv.Must(t, database.Migrate(db))
}
