package database

import (
	"fmt"

	"github.com/go-gormigrate/gormigrate/v2"
	"gorm.io/gorm"

	"github.com/eventq/eventq/models"
)

// migrations lists every schema change in order. Append; never edit a migration that shipped.
func migrations() []*gormigrate.Migration {
	return []*gormigrate.Migration{{
		ID: "2026112101_initial",
		Migrate: func(tx *gorm.DB) error {
			return tx.AutoMigrate(
				&models.Tenant{}, &models.PersonalAccessToken{}, &models.Feature{},
				&models.AudienceMember{}, &models.Product{}, &models.TrackedEvent{},
			)
		},
	}, {
		ID: "2026112102_payments",
		Migrate: func(tx *gorm.DB) error {
			return tx.AutoMigrate(&models.Purchase{}, &models.Entitlement{}, &models.WebhookInbox{})
		},
	}, {
		// Purchase status and payment intent index, revocable entitlements, parked refunds
		// and disputes, and the reconciliation watermark.
		ID: "2026112302_payments_recovery",
		Migrate: func(tx *gorm.DB) error {
			return tx.AutoMigrate(&models.Purchase{}, &models.Entitlement{}, &models.PurchaseReversal{}, &models.ReconcileMark{})
		},
	}}
}

// Migrate brings the schema up to date. It is idempotent: migrations already applied are
// skipped.
func Migrate(db *gorm.DB) error {
	m := gormigrate.New(db, gormigrate.DefaultOptions, migrations())
	if err := m.Migrate(); err != nil {
		return fmt.Errorf("database: migrate: %w", err)
	}
	return nil
}
