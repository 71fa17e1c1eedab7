package database

import (
	"gorm.io/gorm"
)

// The indexes of migration 2026112703_member_indexes, dropped by 2026112704.
const (
	memberIndex    = "idx_tracked_events_member"
	sessionIndex   = "idx_tracked_events_session"
	memberColumns  = "(tenant_id, audience_member_id, created_at, id) WHERE audience_member_id IS NOT NULL"
	sessionColumns = "(tenant_id, session_id)"
)

// memberIndexes made two indexes through which a member's events could be found without
// reading the rest of the tenant's: the events naming a member, and the events of a session.
// They cost every insert more than an erasure or an access export gains from them
// (docs/performance-log.md), and dropMemberIndexes drops them again; the migration stays, as
// shipped.
func memberIndexes(tx *gorm.DB) error {
	if err := eventsIndex(tx, memberIndex, "_member", memberColumns); err != nil {
		return err
	}
	return eventsIndex(tx, sessionIndex, "_session", sessionColumns)
}

// dropMemberIndexes drops what memberIndexes made. On Postgres the partitioned table's index
// goes with each partition's (a catalog change, under a lock of a moment).
func dropMemberIndexes(tx *gorm.DB) error {
	return execAll(tx, "DROP INDEX IF EXISTS "+memberIndex, "DROP INDEX IF EXISTS "+sessionIndex)
}
