// Package products is the one service for a tenant's products: creating, reading, renaming,
// withdrawing and listing them, with Laravel's validation rules and messages. Products are
// never deleted, since purchases refer to them. The HTTP routes and the CLI both use it.
package products

import (
	"context"
	"errors"

	"gorm.io/gorm"

	"github.com/eventq/eventq/internal/apperr"
	"github.com/eventq/eventq/internal/clock"
	"github.com/eventq/eventq/internal/paginate"
	"github.com/eventq/eventq/internal/validate"
	"github.com/eventq/eventq/models"
)

// Field limits of the contract's rules.
const (
	maxName   = 255
	maxAmount = 99_999_999
)

// Service reads and writes products. It is safe for concurrent use.
type Service struct {
	db    *gorm.DB
	clock clock.Clock
}

// New returns a Service on db; clk stamps rows.
func New(db *gorm.DB, clk clock.Clock) *Service { return &Service{db: db, clock: clk} }

// JSON is a product as every JSON document shows it.
type JSON struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Amount    int64  `json:"amount"`
	Currency  string `json:"currency"`
	Active    bool   `json:"active"`
	CreatedAt string `json:"created_at"`
}

// View renders p.
func View(p *models.Product) JSON {
	return JSON{ID: models.FormatID(p.ID), Name: p.Name, Amount: p.Amount, Currency: p.Currency,
		Active: p.Active, CreatedAt: models.FormatTime(p.CreatedAt)}
}

// Create validates in (name, amount in minor units and currency required) and stores an
// active product of tenantID.
func (s *Service) Create(ctx context.Context, tenantID uint64, in map[string]any) (*models.Product, error) {
	var errs apperr.FieldErrors
	p := &models.Product{TenantID: tenantID, Active: true}
	if name, ok := validate.RequiredString(&errs, "name", in["name"], maxName); ok {
		p.Name = name
	}
	if in["amount"] == nil {
		validate.Required(&errs, "amount")
	} else if n, ok := validate.IntegerBetween(&errs, "amount", in["amount"], 0, maxAmount); ok {
		p.Amount = n
	}
	if in["currency"] == nil {
		validate.Required(&errs, "currency")
	} else if c, ok := validate.Currency(&errs, "currency", in["currency"]); ok {
		p.Currency = c
	}
	if err := errs.Err(); err != nil {
		return nil, err
	}
	now := s.clock.Now().UTC()
	p.CreatedAt, p.UpdatedAt = now, now
	if err := s.db.WithContext(ctx).Create(p).Error; err != nil {
		return nil, err
	}
	return p, nil
}

// Update applies name and active when present; amount and currency cannot change.
func (s *Service) Update(ctx context.Context, tenantID uint64, ref string, in map[string]any) (*models.Product, error) {
	p, err := s.Get(ctx, tenantID, ref)
	if err != nil {
		return nil, err
	}
	var errs apperr.FieldErrors
	if validate.Present(in, "name") {
		if name, ok := validate.RequiredString(&errs, "name", in["name"], maxName); ok {
			p.Name = name
		}
	}
	validate.Prohibited(&errs, "amount", in["amount"])
	validate.Prohibited(&errs, "currency", in["currency"])
	if validate.Present(in, "active") {
		if in["active"] == nil {
			validate.Required(&errs, "active")
		} else if active, ok := validate.Boolean(&errs, "active", in["active"]); ok {
			p.Active = active
		}
	}
	if err := errs.Err(); err != nil {
		return nil, err
	}
	p.UpdatedAt = s.clock.Now().UTC()
	if err := s.db.WithContext(ctx).Model(p).Where("tenant_id = ?", p.TenantID).Select("name", "active", "updated_at").Updates(p).Error; err != nil {
		return nil, err
	}
	return p, nil
}

// Get returns tenantID's product with the id ref; anything else is apperr.ErrNotFound.
func (s *Service) Get(ctx context.Context, tenantID uint64, ref string) (*models.Product, error) {
	id, ok := models.ParseID(ref)
	if !ok {
		return nil, apperr.ErrNotFound
	}
	var p models.Product
	err := s.db.WithContext(ctx).Where("id = ? AND tenant_id = ?", id, tenantID).Take(&p).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return nil, apperr.ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	return &p, nil
}

// List returns one page of tenantID's products in id order; active, when not nil, keeps
// only the products on sale (true) or withdrawn (false).
func (s *Service) List(ctx context.Context, tenantID uint64, active *bool, r paginate.Request) (paginate.Page[models.Product], error) {
	q := s.db.WithContext(ctx).Model(&models.Product{}).Where("tenant_id = ?", tenantID)
	if active != nil {
		q = q.Where("active = ?", *active)
	}
	return paginate.Find(q, "id", r, func(p *models.Product) uint64 { return p.ID })
}
