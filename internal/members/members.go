// Package members is the one service for a tenant's audience members: creating, reading,
// changing and listing them, with Laravel's validation rules and messages. The HTTP routes
// and the operator CLI both use it.
package members

import (
	"context"
	"errors"
	"net/url"
	"time"

	"gorm.io/gorm"

	"github.com/eventq/eventq/internal/apperr"
	"github.com/eventq/eventq/internal/cache"
	"github.com/eventq/eventq/internal/changes"
	"github.com/eventq/eventq/internal/clock"
	"github.com/eventq/eventq/internal/database"
	"github.com/eventq/eventq/internal/paginate"
	"github.com/eventq/eventq/internal/validate"
	"github.com/eventq/eventq/models"
)

// Field limits of the contract's rules.
const (
	maxEmail      = 254
	maxName       = 255
	maxExternalID = 191
)

// ExternalPrefix marks a member reference that is the tenant's own id of the member.
const ExternalPrefix = models.ExternalPrefix

var errTaken = "The external id has already been taken."

// ResolveTTL bounds the age of a cached member reference (Resolve). Every change of a member's
// references (a new external id, an erasure) is announced on the change feed, which drops the
// references it touches on every api process that follows it; a process that does not follow
// the feed caches nothing. Only references that found a member are cached, so creating one
// (which the CLI does without Redis) voids nothing.
const ResolveTTL = 30 * time.Second

// Service reads and writes members. It is safe for concurrent use.
type Service struct {
	db      *gorm.DB
	clock   clock.Clock
	changes *changes.Feed                   // nil: nothing announced
	refs    *cache.Followed[refKey, uint64] // members found; a miss is not kept
}

type refKey struct {
	tenant uint64
	ref    string
}

// New returns a Service on db; clk stamps rows and times the cache. feed hears of every
// change (nil: none); references are cached while follower follows the feed (nil: never).
func New(db *gorm.DB, clk clock.Clock, feed *changes.Feed, follower *changes.Follower) *Service {
	s := &Service{db: db, clock: clk, changes: feed, refs: cache.NewFollowed[refKey, uint64](ResolveTTL, clk, follower.Fresh)}
	if follower != nil {
		follower.On(changes.Member, func(c changes.Change) {
			for _, ref := range c.Refs {
				s.refs.Forget(refKey{c.Tenant, ref})
			}
		}, s.refs.Reset)
	}
	return s
}

// Resolve returns the id of the member ref names, as Get would find it, from a cache the
// change feed keeps true: for the entitlement check, asked on every page view.
func (s *Service) Resolve(ctx context.Context, tenantID uint64, ref string) (uint64, error) {
	ref, ok := decodeRef(ref)
	if !ok {
		return 0, apperr.ErrNotFound
	}
	return s.refs.Get(ctx, refKey{tenantID, ref}, func(ctx context.Context) (uint64, error) {
		m, err := s.get(ctx, tenantID, ref) // apperr.ErrNotFound is not cached: a member created later needs no announcement
		if err != nil {
			return 0, err
		}
		return m.ID, nil
	})
}

// announce tells the api processes that the references refs of a member changed.
func (s *Service) announce(ctx context.Context, m *models.AudienceMember, refs ...string) {
	if s.changes == nil {
		return
	}
	refs = append(refs, models.FormatID(m.ID))
	if m.ExternalID != nil {
		refs = append(refs, ExternalPrefix+*m.ExternalID)
	}
	_ = s.changes.Announce(ctx, changes.Change{Kind: changes.Member, Tenant: m.TenantID, ID: m.ID, Refs: refs}) // logged
}

// JSON is a member as every JSON document shows it; unset values are null.
type JSON struct {
	ID         string  `json:"id"`
	ExternalID *string `json:"external_id"`
	Email      string  `json:"email"`
	Name       *string `json:"name"`
	CreatedAt  string  `json:"created_at"`
}

// View renders m.
func View(m *models.AudienceMember) JSON {
	out := JSON{ID: models.FormatID(m.ID), ExternalID: m.ExternalID, Email: m.Email, CreatedAt: models.FormatTime(m.CreatedAt)}
	if m.Name != "" {
		name := m.Name
		out.Name = &name
	}
	return out
}

// Create validates in (a request body as validate.DecodeObject reads it: email required,
// name and external_id optional) and stores a member of tenantID.
func (s *Service) Create(ctx context.Context, tenantID uint64, in map[string]any) (*models.AudienceMember, error) {
	var errs apperr.FieldErrors
	m := &models.AudienceMember{TenantID: tenantID}
	apply(&errs, m, in, true)
	if err := s.unique(ctx, &errs, m); err != nil {
		return nil, err
	}
	if err := errs.Err(); err != nil {
		return nil, err
	}
	now := s.clock.Now().UTC()
	m.CreatedAt, m.UpdatedAt = now, now
	if err := s.db.WithContext(ctx).Create(m).Error; err != nil {
		return nil, s.writeErr(err)
	}
	return m, nil // nothing to announce: a reference that named no member is not cached
}

// Update applies the keys of in that are present (email, name, external_id; null clears name
// and external_id) to the member ref names.
func (s *Service) Update(ctx context.Context, tenantID uint64, ref string, in map[string]any) (*models.AudienceMember, error) {
	m, err := s.Get(ctx, tenantID, ref)
	if err != nil {
		return nil, err
	}
	var before []string
	if m.ExternalID != nil {
		before = append(before, ExternalPrefix+*m.ExternalID)
	}
	var errs apperr.FieldErrors
	apply(&errs, m, in, false)
	if err := s.unique(ctx, &errs, m); err != nil {
		return nil, err
	}
	if err := errs.Err(); err != nil {
		return nil, err
	}
	m.UpdatedAt = s.clock.Now().UTC()
	err = s.db.WithContext(ctx).Model(m).Where("tenant_id = ?", m.TenantID).Select("email", "name", "external_id", "updated_at").Updates(m).Error
	if err != nil {
		return nil, s.writeErr(err)
	}
	s.announce(ctx, m, before...)
	return m, nil
}

// apply validates the keys of in onto m: every key on create (email required), the present
// ones on update (null clears name and external_id).
func apply(errs *apperr.FieldErrors, m *models.AudienceMember, in map[string]any, create bool) {
	if create || validate.Present(in, "email") {
		if in["email"] == nil {
			validate.Required(errs, "email")
		} else if email, ok := validate.Email(errs, "email", in["email"], maxEmail); ok {
			m.Email = email
		}
	}
	if create || validate.Present(in, "name") {
		m.Name = ""
		if name := validate.NullableString(errs, "name", in["name"], maxName); name != nil {
			m.Name = *name
		}
	}
	if create || validate.Present(in, "external_id") {
		m.ExternalID = nil
		if in["external_id"] != nil {
			if ext, ok := validate.StringBetween(errs, "external_id", in["external_id"], 1, maxExternalID); ok {
				m.ExternalID = &ext
			}
		}
	}
}

// unique adds the "taken" error when another member of the tenant has m's external id. The
// unique index is the last word (writeErr); this gives the usual answer without a failed write.
func (s *Service) unique(ctx context.Context, errs *apperr.FieldErrors, m *models.AudienceMember) error {
	if m.ExternalID == nil || !errs.Empty() && len(errs.Messages("external_id")) > 0 {
		return nil
	}
	var n int64
	err := s.db.WithContext(ctx).Model(&models.AudienceMember{}).
		Where("tenant_id = ? AND external_id = ? AND id <> ?", m.TenantID, *m.ExternalID, m.ID).Count(&n).Error // an erased member has none
	if err != nil {
		return err
	}
	if n > 0 {
		errs.Add("external_id", errTaken)
	}
	return nil
}

// writeErr turns a unique violation of a concurrent write into the validation answer.
func (s *Service) writeErr(err error) error {
	if database.UniqueViolation(err) {
		var errs apperr.FieldErrors
		errs.Add("external_id", errTaken)
		return errs.Err()
	}
	return err
}

// Get returns the member ref names, as a path carries it (percent-encoded, decoded here once):
// an id, or ExternalPrefix and the tenant's own id. Anything that is not the tenant's member
// is apperr.ErrNotFound.
func (s *Service) Get(ctx context.Context, tenantID uint64, ref string) (*models.AudienceMember, error) {
	ref, ok := decodeRef(ref)
	if !ok {
		return nil, apperr.ErrNotFound
	}
	return s.get(ctx, tenantID, ref)
}

// decodeRef decodes a path's member reference once, whether the client encoded the ":" of
// ExternalPrefix too or not.
func decodeRef(ref string) (string, bool) {
	ref, err := url.PathUnescape(ref)
	return ref, err == nil
}

// get looks up a decoded reference.
func (s *Service) get(ctx context.Context, tenantID uint64, ref string) (*models.AudienceMember, error) {
	q := s.db.WithContext(ctx).Where("tenant_id = ? AND erased_at IS NULL", tenantID)
	r, ok := models.ParseMemberRef(ref)
	switch {
	case !ok:
		return nil, apperr.ErrNotFound
	case r.ID != 0:
		q = q.Where("id = ?", r.ID)
	default:
		q = q.Where("external_id = ?", r.External)
	}
	var m models.AudienceMember
	if err := q.Take(&m).Error; err != nil {
		if errors.Is(err, gorm.ErrRecordNotFound) {
			return nil, apperr.ErrNotFound
		}
		return nil, err
	}
	return &m, nil
}

// Filter narrows a list: members with this external id or e-mail address, when set.
type Filter struct {
	ExternalID, Email string
}

// List returns one page of tenantID's members in id order.
func (s *Service) List(ctx context.Context, tenantID uint64, f Filter, r paginate.Request) (paginate.Page[models.AudienceMember], error) {
	if !models.Storable(f.ExternalID) || !models.Storable(f.Email) {
		return paginate.Page[models.AudienceMember]{}, nil // no member has such a value
	}
	q := s.db.WithContext(ctx).Model(&models.AudienceMember{}).Where("tenant_id = ? AND erased_at IS NULL", tenantID)
	if f.ExternalID != "" {
		q = q.Where("external_id = ?", f.ExternalID)
	}
	if f.Email != "" {
		q = q.Where("email = ?", f.Email)
	}
	return paginate.Find(q, "id", r, func(m *models.AudienceMember) uint64 { return m.ID })
}
