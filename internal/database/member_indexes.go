package database

import (
	"gorm.io/gorm"

	"github.com/eventq/eventq/models"
)

// memberColumns and sessionColumns are what models.MemberIndex and models.SessionIndex index.
const (
	memberColumns  = "(tenant_id, audience_member_id, created_at, id) WHERE audience_member_id IS NOT NULL"
	sessionColumns = "(tenant_id, session_id)"
)

// memberIndexes makes the two indexes through which a member's events are found without
// reading the rest of the tenant's: the events naming a member, in (created_at, id) order (an
// erasure's deletions and the access export page through them), and the events of a session
// (an erasure deletes those sharing a session with the member). Built as eventsIndex builds
// them: on Postgres concurrently, partition by partition, while ingestion goes on.
func memberIndexes(tx *gorm.DB) error {
	if err := eventsIndex(tx, models.MemberIndex, "_member", memberColumns); err != nil {
		return err
	}
	return eventsIndex(tx, models.SessionIndex, "_session", sessionColumns)
}
