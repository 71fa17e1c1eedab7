// Package tenants is the one service for tenants: creating, reading, changing and listing
// them, rotating their site keys and switching their features, with Laravel's validation
// rules and messages. The operator API and the CLI both use it.
package tenants

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"

	"gorm.io/gorm"

	"github.com/eventq/eventq/internal/apperr"
	"github.com/eventq/eventq/internal/clock"
	"github.com/eventq/eventq/internal/database"
	"github.com/eventq/eventq/internal/features"
	"github.com/eventq/eventq/internal/paginate"
	"github.com/eventq/eventq/models"
)

const errAccountTaken = "The psp account id has already been taken."

// Service reads and writes tenants. It is safe for concurrent use.
type Service struct {
	db    *gorm.DB
	clock clock.Clock
	flags *features.Flags
}

// New returns a Service on db; flags holds the tenants' features, clk stamps rows.
func New(db *gorm.DB, flags *features.Flags, clk clock.Clock) *Service {
	return &Service{db: db, clock: clk, flags: flags}
}

// Features are a tenant's switchable features, as JSON shows them.
type Features struct {
	UseQueueEvents bool `json:"UseQueueEvents"`
	AnonymizeIp    bool `json:"AnonymizeIp"`
}

// JSON is a tenant as the operator API and the CLI show it; lists are [] when unset.
type JSON struct {
	ID                string   `json:"id"`
	Name              string   `json:"name"`
	SiteKey           string   `json:"site_key"`
	PSPAccountID      *string  `json:"psp_account_id"`
	AllowedHostnames  []string `json:"allowed_hostnames"`
	RedactQueryParams []string `json:"redact_query_params"`
	Features          Features `json:"features"`
	CreatedAt         string   `json:"created_at"`
}

func view(t *models.Tenant, flags map[string]bool) JSON {
	nonNil := func(l []string) []string {
		if l == nil {
			return []string{}
		}
		return l
	}
	return JSON{ID: models.FormatID(t.ID), Name: t.Name, SiteKey: t.SiteKey, PSPAccountID: t.PSPAccountID,
		AllowedHostnames: nonNil(t.AllowedHostnames), RedactQueryParams: nonNil(t.RedactQueryParams),
		Features:  Features{UseQueueEvents: flags[features.UseQueueEvents], AnonymizeIp: flags[features.AnonymizeIp]},
		CreatedAt: models.FormatTime(t.CreatedAt)}
}

// View renders tenant t with its features read from the database.
func (s *Service) View(ctx context.Context, t *models.Tenant) (JSON, error) {
	flags, err := s.flags.OfTenants(ctx, []uint64{t.ID})
	if err != nil {
		return JSON{}, err
	}
	return view(t, flags[t.ID]), nil
}

// Create validates in (name required; psp_account_id, allowed_hostnames and
// redact_query_params optional) and stores a tenant with a new site key.
func (s *Service) Create(ctx context.Context, in map[string]any) (*models.Tenant, error) {
	t := &models.Tenant{AllowedHostnames: models.StringList{}, RedactQueryParams: models.StringList{}}
	var errs apperr.FieldErrors
	apply(&errs, t, in, true)
	if err := s.accountFree(ctx, &errs, t); err != nil {
		return nil, err
	}
	if err := errs.Err(); err != nil {
		return nil, err
	}
	key, err := newSiteKey()
	if err != nil {
		return nil, err
	}
	t.SiteKey = key
	now := s.clock.Now().UTC()
	t.CreatedAt, t.UpdatedAt = now, now
	if err := s.db.WithContext(ctx).Create(t).Error; err != nil {
		return nil, writeErr(err)
	}
	return t, nil
}

// Update applies the keys of in that are present (those of Create; null clears
// psp_account_id and empties a list) to tenant id.
func (s *Service) Update(ctx context.Context, id uint64, in map[string]any) (*models.Tenant, error) {
	t, err := s.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	var errs apperr.FieldErrors
	apply(&errs, t, in, false)
	if err := s.accountFree(ctx, &errs, t); err != nil {
		return nil, err
	}
	if err := errs.Err(); err != nil {
		return nil, err
	}
	t.UpdatedAt = s.clock.Now().UTC()
	err = s.db.WithContext(ctx).Model(t).
		Select("name", "psp_account_id", "allowed_hostnames", "redact_query_params", "updated_at").Updates(t).Error
	if err != nil {
		return nil, writeErr(err)
	}
	return t, nil
}

// RotateSiteKey gives tenant id a new site key; ingestion refuses the old one within a second
// (tracking's site key cache).
func (s *Service) RotateSiteKey(ctx context.Context, id uint64) (*models.Tenant, error) {
	t, err := s.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if t.SiteKey, err = newSiteKey(); err != nil {
		return nil, err
	}
	t.UpdatedAt = s.clock.Now().UTC()
	if err := s.db.WithContext(ctx).Model(t).Select("site_key", "updated_at").Updates(t).Error; err != nil {
		return nil, err
	}
	return t, nil
}

// Get returns tenant id, or apperr.ErrNotFound.
func (s *Service) Get(ctx context.Context, id uint64) (*models.Tenant, error) {
	if id == 0 {
		return nil, apperr.ErrNotFound
	}
	var t models.Tenant
	err := s.db.WithContext(ctx).Take(&t, id).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return nil, apperr.ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	return &t, nil
}

// GetRef returns the tenant whose id is the string ref, or apperr.ErrNotFound.
func (s *Service) GetRef(ctx context.Context, ref string) (*models.Tenant, error) {
	id, _ := models.ParseID(ref)
	return s.Get(ctx, id)
}

// List returns one page of tenants in id order, rendered with their features.
func (s *Service) List(ctx context.Context, r paginate.Request) (paginate.Page[JSON], error) {
	page, err := paginate.Find(s.db.WithContext(ctx).Model(&models.Tenant{}), "id", r, func(t *models.Tenant) uint64 { return t.ID })
	if err != nil {
		return paginate.Page[JSON]{}, err
	}
	ids := make([]uint64, len(page.Items))
	for i := range page.Items {
		ids[i] = page.Items[i].ID
	}
	flags, err := s.flags.OfTenants(ctx, ids)
	if err != nil {
		return paginate.Page[JSON]{}, err
	}
	return paginate.Map(page, func(t *models.Tenant) JSON { return view(t, flags[t.ID]) }), nil
}

// FeatureJSON is the answer of a feature switch.
type FeatureJSON struct {
	Feature  string `json:"feature"`
	TenantID string `json:"tenant_id"`
	Active   bool   `json:"active"`
}

// SetFeature switches a known feature of tenant id; an unknown feature or tenant is apperr.ErrNotFound.
// Every api process sees the change within a second (features.CacheTTL).
func (s *Service) SetFeature(ctx context.Context, id uint64, feature string, active bool) (FeatureJSON, error) {
	if !features.IsKnown(feature) {
		return FeatureJSON{}, apperr.ErrNotFound
	}
	if _, err := s.Get(ctx, id); err != nil {
		return FeatureJSON{}, err
	}
	if err := s.flags.Set(ctx, feature, id, active); err != nil {
		return FeatureJSON{}, err
	}
	return FeatureJSON{Feature: feature, TenantID: models.FormatID(id), Active: active}, nil
}

// accountFree adds the "taken" error when another tenant has t's connected account.
func (s *Service) accountFree(ctx context.Context, errs *apperr.FieldErrors, t *models.Tenant) error {
	if t.PSPAccountID == nil || len(errs.Messages("psp_account_id")) > 0 {
		return nil
	}
	var n int64
	err := s.db.WithContext(ctx).Model(&models.Tenant{}).Where("psp_account_id = ? AND id <> ?", *t.PSPAccountID, t.ID).Count(&n).Error
	if err != nil {
		return err
	}
	if n > 0 {
		errs.Add("psp_account_id", errAccountTaken)
	}
	return nil
}

// writeErr turns the unique index's refusal of a concurrent write into the validation answer.
func writeErr(err error) error {
	if database.UniqueViolation(err) {
		var errs apperr.FieldErrors
		errs.Add("psp_account_id", errAccountTaken)
		return errs.Err()
	}
	return err
}

func newSiteKey() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("tenants: site key: %w", err)
	}
	return "site_" + hex.EncodeToString(b), nil
}
