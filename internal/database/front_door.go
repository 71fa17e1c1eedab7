package database

import (
	"fmt"

	"gorm.io/gorm"

	"github.com/eventq/eventq/models"
)

// frontDoor is the schema of the HTTP front door: members' external ids (unique within a
// tenant) and e-mail addresses no longer unique, products that can be withdrawn (existing
// ones stay on sale), tenants' allowed hostnames and redacted query parameters (empty lists),
// and connected accounts unique across tenants. Existing rows are kept; a database where two
// tenants share a connected account is refused with their ids, for the operator to settle.
func frontDoor(tx *gorm.DB) error {
	m := tx.Migrator()
	// One row per account at most. Before, nothing stopped two; say which, rather than fail
	// on the index with a driver's message.
	if err := tx.Exec("UPDATE tenants SET psp_account_id = NULL WHERE psp_account_id = ''").Error; err != nil {
		return err
	}
	var dup []struct {
		Account string
		N       int
	}
	if err := tx.Raw(`SELECT psp_account_id AS account, count(*) AS n FROM tenants WHERE psp_account_id IS NOT NULL
		GROUP BY psp_account_id HAVING count(*) > 1 ORDER BY psp_account_id`).Scan(&dup).Error; err != nil {
		return err
	}
	if len(dup) > 0 {
		return fmt.Errorf("tenants share connected account %s (%d tenants): give each tenant its own psp_account_id (or none) and migrate again", dup[0].Account, dup[0].N)
	}
	for _, drop := range []struct {
		model any
		index string
	}{
		{&models.Tenant{}, "idx_tenants_psp_account_id"},
		{&models.AudienceMember{}, "audience_members_tenant_email_unique"},
	} {
		if m.HasIndex(drop.model, drop.index) {
			if err := m.DropIndex(drop.model, drop.index); err != nil {
				return err
			}
		}
	}
	return tx.AutoMigrate(&models.Tenant{}, &models.AudienceMember{}, &models.Product{})
}
