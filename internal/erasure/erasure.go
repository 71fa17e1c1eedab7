// Package erasure carries out a data subject's erasure: the request is a row (durable from the
// 202 on), and Run, in a worker's loop (RunPending) or the CLI, does the work once however
// often it is interrupted: the member's entitlements ended, the events naming the member and
// every event sharing a session with them redacted in place in the queue and the dead letters
// and deleted from the database, then the request marked done with its counts. Each step can
// run again: a redaction writes an element only where it is unchanged, a deletion deletes what
// is left, and the counts grow by what each run did, atomically.
package erasure

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"gorm.io/gorm"

	"github.com/eventq/eventq/internal/apperr"
	"github.com/eventq/eventq/internal/changes"
	"github.com/eventq/eventq/internal/clock"
	"github.com/eventq/eventq/internal/eventqueue"
	"github.com/eventq/eventq/internal/eventstore"
	"github.com/eventq/eventq/models"
)

// Settle is how long after a request its events are deleted: ingestion's caches of erased
// members (tracking) are at most this old, so an event tracked later is stored without the
// member and one tracked just before is deleted with the rest.
const Settle = time.Second

// Service requests and carries out erasures. It is safe for concurrent use.
type Service struct {
	DB      *gorm.DB
	Events  *eventstore.Store
	Queue   *eventqueue.Store
	Changes *changes.Feed // nil: nothing announced
	Clock   clock.Clock
	Log     *slog.Logger
}

// JSON is an erasure as the API shows it; counts are null until it is done.
type JSON struct {
	ID             string  `json:"id"`
	MemberID       string  `json:"member_id"`
	Status         string  `json:"status"`
	RequestedAt    string  `json:"requested_at"`
	CompletedAt    *string `json:"completed_at"`
	EventsDeleted  *int64  `json:"events_deleted"`
	EventsRedacted *int64  `json:"events_redacted"`
}

// View renders e.
func View(e *models.MemberErasure) JSON {
	out := JSON{ID: models.FormatID(e.ID), MemberID: models.FormatID(e.MemberID), Status: e.Status,
		RequestedAt: models.FormatTime(e.RequestedAt)}
	if e.Status == models.ErasureDone {
		t := models.FormatTime(*e.CompletedAt)
		out.CompletedAt, out.EventsDeleted, out.EventsRedacted = &t, e.EventsDeleted, e.EventsRedacted
	}
	return out
}

// Request records the erasure of member m (found by the caller, not erased) and blanks its
// personal fields at once, in one transaction: from then on it answers 404 everywhere and its
// external id is free. The work is done by Run.
func (s *Service) Request(ctx context.Context, m *models.AudienceMember) (*models.MemberErasure, error) {
	now := s.Clock.Now().UTC()
	e := &models.MemberErasure{TenantID: m.TenantID, MemberID: m.ID, ExternalID: m.ExternalID,
		Status: models.ErasurePending, RequestedAt: now, EventsDeleted: new(int64), EventsRedacted: new(int64)}
	if m.ExternalID != nil {
		e.ExternalHash = models.ExternalHash(m.TenantID, *m.ExternalID)
	}
	err := s.DB.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		res := tx.Model(&models.AudienceMember{}).Where("tenant_id = ? AND id = ? AND erased_at IS NULL", m.TenantID, m.ID).
			Updates(map[string]any{"erased_at": now, "email": "", "name": "", "external_id": nil, "updated_at": now})
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			return apperr.ErrNotFound // erased by a concurrent request
		}
		return tx.Create(e).Error
	})
	if err != nil {
		return nil, err
	}
	// Before the 202: ingestion, on every api process, reads this count with each request
	// that names a member, so the next event naming it is stored without it.
	if s.Queue != nil {
		if err := s.Queue.NoteErasure(ctx, m.TenantID); err != nil {
			s.Log.Warn("erasure: ingestion not told at once; its caches of erased members expire within a second", "tenant_id", m.TenantID, "err", err)
		}
	}
	s.announceMember(ctx, e)
	return e, nil
}

// Get returns tenantID's erasure id, or apperr.ErrNotFound.
func (s *Service) Get(ctx context.Context, tenantID, id uint64) (*models.MemberErasure, error) {
	var e models.MemberErasure
	err := s.DB.WithContext(ctx).Where("id = ? AND tenant_id = ?", id, tenantID).Take(&e).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return nil, apperr.ErrNotFound
	}
	return &e, err
}

// announceMember tells the api processes that the member's references are void.
func (s *Service) announceMember(ctx context.Context, e *models.MemberErasure) {
	if s.Changes == nil {
		return
	}
	refs := models.MemberRefs(e.MemberID, e.ExternalID)
	_ = s.Changes.Announce(ctx, changes.Change{Kind: changes.Member, Tenant: e.TenantID, ID: e.MemberID, Refs: refs}) // logged
}

// refs are the values of audience_member_id that name the erased member: its id and
// "external:" + its external id, never a bare external id (which names no member).
func refs(e *models.MemberErasure) []string { return models.MemberRefs(e.MemberID, e.ExternalID) }
