package database

import (
	"context"
	"fmt"
	"strings"
	"time"

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
				&v1Tenant{}, &models.PersonalAccessToken{}, &models.Feature{},
				&v1AudienceMember{}, &v1Product{}, &models.TrackedEvent{},
			)
		},
	}, {
		ID: "2026112102_payments",
		Migrate: func(tx *gorm.DB) error {
			return tx.AutoMigrate(&v1Purchase{}, &v1Entitlement{}, &models.WebhookInbox{})
		},
	}, {
		ID: "2026112301_queue_fronts",
		Migrate: func(tx *gorm.DB) error {
			// Events stored before this migration are taken as queued if their tenant's flag
			// is active now: the closest the database can tell.
			// (A database created by this version got the column from the first migration,
			// which migrates the current model.)
			if !tx.Migrator().HasColumn(&models.TrackedEvent{}, "Queued") {
				if err := tx.Migrator().AddColumn(&models.TrackedEvent{}, "Queued"); err != nil {
					return err
				}
			}
			var flags []models.Feature
			if err := tx.Where("name = ? AND value = ?", "UseQueueEvents", "true").Find(&flags).Error; err != nil {
				return err
			}
			for _, f := range flags {
				_, id, _ := strings.Cut(f.Scope, "|")
				if err := tx.Model(&models.TrackedEvent{}).Where("tenant_id = ?", id).Update("queued", true).Error; err != nil {
					return err
				}
			}
			return tx.AutoMigrate(&models.QueueFront{})
		},
	}, {
		// Purchase status and payment intent index, revocable entitlements, parked refunds
		// and disputes, and the reconciliation watermark.
		ID: "2026112302_payments_recovery",
		Migrate: func(tx *gorm.DB) error {
			return tx.AutoMigrate(&v1Purchase{}, &v1Entitlement{}, &models.PurchaseReversal{}, &models.ReconcileMark{})
		},
	}, {
		// Stored events that can be pruned: day partitions on Postgres, incremental
		// auto-vacuum on SQLite (prepareRetention).
		ID:      "2026112401_event_retention",
		Migrate: func(tx *gorm.DB) error { return prepareRetention(tx, time.Now()) },
	}, {
		// Pending marks of ingested events kept per batch instead of per row.
		ID:      "2026112601_pending_batches",
		Migrate: func(tx *gorm.DB) error { return tx.AutoMigrate(&models.PendingBatch{}) },
	}, {
		// The events marked pending indexed alone (models.PendingIndex), instead of an index
		// of queue_pending over every row.
		ID:      "2026112602_pending_index",
		Migrate: pendingIndex,
	}, {
		// Members, products and tenants as the HTTP front door manages them (frontDoor).
		ID:      "2026112701_front_door",
		Migrate: frontDoor,
	}, {
		// Erasure of members: their erased mark and the durable requests.
		ID: "2026112702_erasures",
		Migrate: func(tx *gorm.DB) error {
			return tx.AutoMigrate(&models.AudienceMember{}, &models.MemberErasure{})
		},
	}, {
		// A member's events and a session's found through indexes of their own (memberIndexes).
		ID:      "2026112703_member_indexes",
		Migrate: memberIndexes,
	}, {
		// Those indexes dropped: every insert paid for them (dropMemberIndexes).
		ID:      "2026112704_drop_member_indexes",
		Migrate: dropMemberIndexes,
	}, {
		// Every key of a tenant's table includes tenant_id (tenantKeys).
		ID:      "2026112801_tenant_keys",
		Migrate: tenantKeys,
	}}
}

// Migrate brings the schema up to date. It is idempotent: migrations already applied are
// skipped. Migrations of one database run one at a time, whichever process starts them
// (lockMigrations): a second waits for the first.
func Migrate(db *gorm.DB) error {
	unlock, err := lockMigrations(context.Background(), db)
	if err != nil {
		return err
	}
	defer unlock()
	m := gormigrate.New(db, gormigrate.DefaultOptions, migrations())
	if err := m.Migrate(); err != nil {
		return fmt.Errorf("database: migrate: %w", err)
	}
	if err := distribute(db); err != nil {
		return fmt.Errorf("database: migrate: citus: %w", err)
	}
	return nil
}
