package erasure

import (
	"context"
	"fmt"

	"gorm.io/gorm"

	"github.com/eventq/eventq/models"
)

// Erased are a tenant's erased members, as ingestion and the spool's drain ask about them:
// their ids, and the hashes of their former external ids (models.ExternalHash).
type Erased struct {
	tenant      uint64
	ids, hashes map[string]bool
}

// LoadErased reads tenantID's erased members.
func LoadErased(ctx context.Context, db *gorm.DB, tenantID uint64) (*Erased, error) {
	var rows []models.MemberErasure
	err := db.WithContext(ctx).Select("member_id", "external_hash").Where("tenant_id = ?", tenantID).Find(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("erasure: erased members: %w", err)
	}
	out := &Erased{tenant: tenantID, ids: map[string]bool{}, hashes: map[string]bool{}}
	for _, r := range rows {
		out.ids[models.FormatID(r.MemberID)] = true
		if r.ExternalHash != "" {
			out.hashes[r.ExternalHash] = true
		}
	}
	return out, nil
}

// None reports whether the tenant has no erased member (a nil Erased has none).
func (e *Erased) None() bool { return e == nil || len(e.ids)+len(e.hashes) == 0 }

// Names reports whether an event's audience_member_id names an erased member: its id, or
// "external:" and its former external id while no other member has taken it (taken, unless
// nil, says whether a live member has that external id now).
func (e *Erased) Names(m string, taken func(external string) bool) bool {
	if e.None() {
		return false
	}
	ref, ok := models.ParseMemberRef(m)
	switch {
	case !ok:
		return false
	case ref.ID != 0:
		return e.ids[m]
	}
	return e.hashes[models.ExternalHash(e.tenant, ref.External)] && (taken == nil || !taken(ref.External))
}

// ExternalTaken reports whether a member of tenantID (not erased) has the external id now: a
// former external id of an erased member names that member once another has taken it. It is
// asked only of events naming an erased member's former external id; when the database
// cannot answer, the id counts as not taken (the event is stored without a member).
func ExternalTaken(ctx context.Context, db *gorm.DB, tenantID uint64, external string) bool {
	var n int64
	err := db.WithContext(ctx).Model(&models.AudienceMember{}).
		Where("tenant_id = ? AND external_id = ? AND erased_at IS NULL", tenantID, external).Count(&n).Error
	return err == nil && n > 0
}
