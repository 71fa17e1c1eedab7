package database

import (
	"github.com/go-gormigrate/gormigrate/v2"
	"gorm.io/gorm"
)

// MigrateTo applies the migrations up to and including id: a database as the version that
// shipped id made it. Tests and the bench use it to build an earlier version's schema.
func MigrateTo(db *gorm.DB, id string) error {
	return gormigrate.New(db, gormigrate.DefaultOptions, migrations()).MigrateTo(id)
}
