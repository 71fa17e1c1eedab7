package erasure

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/eventq/eventq/internal/database"

	"gorm.io/gorm"

	"github.com/eventq/eventq/internal/changes"
	"github.com/eventq/eventq/models"
)

// Run carries out tenantID's erasure id to done; running it again, or beside another Run of
// it, does no harm and counts nothing twice.
//
// Order matters for a run cut short: the events that name the member are deleted last, so a
// later run finds the same sessions again from them.
func (s *Service) Run(ctx context.Context, tenantID, id uint64) error {
	var e models.MemberErasure
	if err := s.DB.WithContext(ctx).Where("tenant_id = ? AND id = ?", tenantID, id).Take(&e).Error; err != nil {
		return fmt.Errorf("erasure %d: %w", id, err)
	}
	if e.Status == models.ErasureDone {
		return nil
	}
	if wait := e.RequestedAt.Add(Settle).Sub(s.Clock.Now()); wait > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
	// Events accepted before the 202 and still in the ingestion spool (a database outage) are
	// dropped by its drain, which knows the member is erased; the erasure is done only once
	// the tenant's spool is empty, so that nothing of the member is stored after it.
	if err := s.spoolDrained(ctx, e.TenantID); err != nil {
		return fmt.Errorf("erasure %d: %w", id, err)
	}
	names := refs(&e)
	db := s.DB.WithContext(ctx)

	// Entitlements end (purchases stay, for the books).
	now := s.Clock.Now().UTC()
	if err := db.Model(&models.Entitlement{}).Where("tenant_id = ? AND audience_member_id = ? AND revoked_at IS NULL", e.TenantID, e.MemberID).
		Updates(map[string]any{"revoked_at": now, "updated_at": now}).Error; err != nil {
		return fmt.Errorf("erasure %d: entitlements: %w", id, err)
	}
	if s.Changes != nil {
		if err := s.Changes.Announce(ctx, changes.Change{Kind: changes.Entitlements, Tenant: e.TenantID, ID: e.MemberID}); err != nil {
			return err
		}
	}

	// The member's sessions.
	sessions, err := s.Events.Sessions(ctx, e.TenantID, names)
	if err != nil {
		return fmt.Errorf("erasure %d: %w", id, err)
	}

	// The copies in Redis, redacted where they are.
	match := matcher(names, sessions)
	queued, err := s.Queue.RedactQueue(ctx, e.TenantID, func(el []byte) ([]byte, bool) { return redactEvent(el, match) })
	if err != nil {
		return fmt.Errorf("erasure %d: %w", id, err)
	}
	dead, err := s.Queue.RedactDeadLetters(ctx, e.TenantID, func(el []byte) ([]byte, bool) { return redactDeadLetter(el, match) })
	if err != nil {
		return fmt.Errorf("erasure %d: %w", id, err)
	}
	if err := s.add(ctx, &e, "events_redacted", int64(queued+dead)); err != nil {
		return err
	}

	// The stored events: those sharing a session first, those naming the member last. Each is
	// a sweep of the tenant's events through its (tenant_id, created_at) index: erasures are
	// rare, and an index of members or sessions would cost every insert more than erasures gain.
	member := map[string]bool{}
	for _, n := range names {
		member[n] = true
	}
	session := make(map[string]bool, len(sessions))
	for _, x := range sessions {
		session[x] = true
	}
	count := func(tx *gorm.DB, n int64) error {
		return tx.Model(&models.MemberErasure{}).Where("tenant_id = ? AND id = ?", e.TenantID, id).
			Update("events_deleted", gorm.Expr("COALESCE(events_deleted, 0) + ?", n)).Error
	}
	if len(sessions) > 0 {
		err := s.Events.Sweep(ctx, e.TenantID, nil, func(ev *models.TrackedEvent) bool {
			return session[ev.SessionID] && (ev.AudienceMemberID == nil || !member[*ev.AudienceMemberID])
		}, count)
		if err != nil {
			return fmt.Errorf("erasure %d: %w", id, err)
		}
	}
	if err := s.Events.Sweep(ctx, e.TenantID, names, nil, count); err != nil {
		return fmt.Errorf("erasure %d: %w", id, err)
	}

	if err := s.spoolDrained(ctx, e.TenantID); err != nil {
		return fmt.Errorf("erasure %d: %w", id, err)
	}
	done := s.Clock.Now().UTC()
	err = db.Model(&models.MemberErasure{}).Where("tenant_id = ? AND id = ? AND status = ?", e.TenantID, id, models.ErasurePending).
		Updates(map[string]any{"status": models.ErasureDone, "completed_at": done, "external_id": nil}).Error
	if err != nil {
		return fmt.Errorf("erasure %d: done: %w", id, err)
	}
	s.announceMember(ctx, &e)
	return nil
}

// add adds n to erasure e's counter column.
func (s *Service) add(ctx context.Context, e *models.MemberErasure, column string, n int64) error {
	if n == 0 {
		return nil
	}
	err := s.DB.WithContext(ctx).Model(&models.MemberErasure{}).Where("tenant_id = ? AND id = ?", e.TenantID, e.ID).
		Update(column, gorm.Expr("COALESCE("+column+", 0) + ?", n)).Error
	if err != nil {
		return fmt.Errorf("erasure %d: %s: %w", e.ID, column, err)
	}
	return nil
}

// matcher reports whether a queued event is the member's: it names the member, or shares a
// session with an event that does.
func matcher(names, sessions []string) func(*models.QueueEvent) bool {
	member := map[string]bool{}
	for _, n := range names {
		member[n] = true
	}
	session := map[string]bool{}
	for _, s := range sessions {
		session[s] = true
	}
	return func(ev *models.QueueEvent) bool {
		return (ev.AudienceMemberID != nil && member[*ev.AudienceMemberID]) || (ev.SessionID != "" && session[ev.SessionID])
	}
}

// redactEvent rewrites a queued event the matcher picks: id, type, page_hostname,
// event_sequence and created_at kept, audience_member_id null, the other fields "".
func redactEvent(el []byte, match func(*models.QueueEvent) bool) ([]byte, bool) {
	var ev models.QueueEvent
	if json.Unmarshal(el, &ev) != nil || !match(&ev) {
		return nil, false
	}
	ev.AudienceMemberID, ev.SessionID, ev.URL, ev.PagePath, ev.UserAgent, ev.IPAddress = nil, "", "", "", "", ""
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if enc.Encode(ev) != nil {
		return nil, false
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), true
}

// redactDeadLetter rewrites the event of a dead letter {"offset","deliveries","event"}.
func redactDeadLetter(el []byte, match func(*models.QueueEvent) bool) ([]byte, bool) {
	var d struct {
		Offset     json.RawMessage `json:"offset"`
		Deliveries json.RawMessage `json:"deliveries"`
		Event      json.RawMessage `json:"event"`
	}
	if json.Unmarshal(el, &d) != nil {
		return nil, false
	}
	ev, ok := redactEvent(d.Event, match)
	if !ok {
		return nil, false
	}
	out := append([]byte(`{"offset":`), d.Offset...)
	out = append(append(out, `,"deliveries":`...), d.Deliveries...)
	out = append(append(out, `,"event":`...), ev...)
	return append(out, '}'), true
}

// RunPending runs every pending erasure, oldest first, and returns how many it finished. The
// pending ones are found across tenants (database.AcrossTenants); each runs as its tenant's.
func (s *Service) RunPending(ctx context.Context) (int, error) {
	var pending []models.MemberErasure
	err := database.AcrossTenants(s.DB.WithContext(ctx), func(tx *gorm.DB) error {
		return tx.Select("tenant_id", "id").Where("status = ?", models.ErasurePending).
			Order("id").Limit(100).Find(&pending).Error
	})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, p := range pending {
		err := s.Run(ctx, p.TenantID, p.ID)
		if errors.Is(err, ErrSpooled) { // its tenant's spool drains first; the others go on
			continue
		}
		if err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// ErrSpooled is an erasure waiting for its tenant's ingestion spool to be drained.
var ErrSpooled = errors.New("the tenant's ingestion spool is not drained yet; the erasure waits for it")

// spoolDrained returns ErrSpooled while tenantID has spooled requests.
func (s *Service) spoolDrained(ctx context.Context, tenantID uint64) error {
	if s.Queue == nil {
		return nil
	}
	spooled, err := s.Queue.Spooled(ctx, tenantID)
	if err != nil {
		return err
	}
	if spooled {
		return ErrSpooled
	}
	return nil
}
