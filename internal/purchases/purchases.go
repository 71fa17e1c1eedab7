// Package purchases is the one service that reads what members bought: purchases and the
// entitlements they grant. Fulfilment and revocation (internal/payments) write them; this
// package answers the questions the HTTP routes and the CLI ask, the entitlement check (on
// every page view of a paywalled site) from a cache the change feed keeps true.
package purchases

import (
	"context"
	"errors"
	"time"

	"gorm.io/gorm"

	"github.com/eventq/eventq/internal/apperr"
	"github.com/eventq/eventq/internal/cache"
	"github.com/eventq/eventq/internal/changes"
	"github.com/eventq/eventq/internal/clock"
	"github.com/eventq/eventq/models"
)

// CheckTTL bounds the age of a cached entitlement answer. Every grant and revocation is
// announced on the change feed (internal/changes), which drops the member's answers on every
// api process that follows it, within milliseconds; a process that does not follow the feed
// caches nothing. The TTL is only the bound for a change whose announcement failed.
const CheckTTL = 30 * time.Second

// Service answers questions about purchases and entitlements. It is safe for concurrent use.
type Service struct {
	db      *gorm.DB
	inForce *cache.Followed[inForceKey, []models.Entitlement]
}

type inForceKey struct{ tenant, member uint64 }

// New returns a Service on db whose entitlement answers are cached while follower follows the
// change feed (nil: never); clk times the cache.
func New(db *gorm.DB, clk clock.Clock, follower *changes.Follower) *Service {
	s := &Service{db: db, inForce: cache.NewFollowed[inForceKey, []models.Entitlement](CheckTTL, clk, follower.Fresh)}
	if follower != nil {
		follower.On(changes.Entitlements, func(c changes.Change) { s.inForce.Forget(inForceKey{c.Tenant, c.ID}) }, s.inForce.Reset)
	}
	return s
}

// PurchaseJSON is a purchase as the HTTP routes show it.
type PurchaseJSON struct {
	ID               string `json:"id"`
	AudienceMemberID string `json:"audience_member_id"`
	ProductID        string `json:"product_id"`
	AmountTotal      int64  `json:"amount_total"`
	Currency         string `json:"currency"`
	Status           string `json:"status"`
	CreatedAt        string `json:"created_at"`
}

// ViewPurchase renders p.
func ViewPurchase(p *models.Purchase) PurchaseJSON {
	return PurchaseJSON{ID: models.FormatID(p.ID), AudienceMemberID: models.FormatID(p.AudienceMemberID),
		ProductID: models.FormatID(p.ProductID), AmountTotal: p.AmountTotal, Currency: p.Currency,
		Status: p.Status, CreatedAt: models.FormatTime(p.CreatedAt)}
}

// EntitlementJSON is an entitlement as the HTTP routes show it.
type EntitlementJSON struct {
	ID         string `json:"id"`
	ProductID  string `json:"product_id"`
	PurchaseID string `json:"purchase_id"`
	GrantedAt  string `json:"granted_at"`
}

// ViewEntitlement renders e.
func ViewEntitlement(e *models.Entitlement) EntitlementJSON {
	return EntitlementJSON{ID: models.FormatID(e.ID), ProductID: models.FormatID(e.ProductID),
		PurchaseID: models.FormatID(e.PurchaseID), GrantedAt: models.FormatTime(e.CreatedAt)}
}

// Purchases lists tenantID's purchases oldest first, of one member when member is not 0.
func (s *Service) Purchases(ctx context.Context, tenantID, member uint64) ([]models.Purchase, error) {
	q := s.db.WithContext(ctx).Where("tenant_id = ?", tenantID)
	if member != 0 {
		q = q.Where("audience_member_id = ?", member)
	}
	var rows []models.Purchase
	if err := q.Order("created_at, id").Find(&rows).Error; err != nil {
		return nil, err
	}
	return rows, nil
}

// Entitlements lists tenantID's entitlements in force (not revoked) by id, of one member when
// member is not 0, read from the database.
func (s *Service) Entitlements(ctx context.Context, tenantID, member uint64) ([]models.Entitlement, error) {
	q := s.db.WithContext(ctx).Where("tenant_id = ? AND revoked_at IS NULL", tenantID)
	if member != 0 {
		q = q.Where("audience_member_id = ?", member)
	}
	var rows []models.Entitlement
	if err := q.Order("id").Find(&rows).Error; err != nil {
		return nil, err
	}
	return rows, nil
}

// Granted lists every entitlement member was ever granted by tenantID, revoked or not, by id.
func (s *Service) Granted(ctx context.Context, tenantID, member uint64) ([]models.Entitlement, error) {
	var rows []models.Entitlement
	err := s.db.WithContext(ctx).Where("tenant_id = ? AND audience_member_id = ?", tenantID, member).Order("id").Find(&rows).Error
	return rows, err
}

// GrantJSON is an entitlement as the access export shows it: with when it ended, if it did.
type GrantJSON struct {
	EntitlementJSON
	RevokedAt *string `json:"revoked_at"`
}

// ViewGrant renders e with its revocation time.
func ViewGrant(e *models.Entitlement) GrantJSON {
	out := GrantJSON{EntitlementJSON: ViewEntitlement(e)}
	if e.RevokedAt != nil {
		t := models.FormatTime(*e.RevokedAt)
		out.RevokedAt = &t
	}
	return out
}

// InForce lists the member's entitlements in force by id, from the cache while the change
// feed is followed, else from the database.
func (s *Service) InForce(ctx context.Context, tenantID, member uint64) ([]models.Entitlement, error) {
	return s.inForce.Get(ctx, inForceKey{tenantID, member}, func(ctx context.Context) ([]models.Entitlement, error) {
		return s.Entitlements(ctx, tenantID, member)
	})
}

// Check returns the member's first entitlement in force to product, or nil when there is none.
func (s *Service) Check(ctx context.Context, tenantID, member, product uint64) (*models.Entitlement, error) {
	all, err := s.InForce(ctx, tenantID, member)
	if err != nil {
		return nil, err
	}
	for i := range all {
		if all[i].ProductID == product {
			return &all[i], nil
		}
	}
	return nil, nil
}

// Get returns tenantID's purchase id, or apperr.ErrNotFound.
func (s *Service) Get(ctx context.Context, tenantID, id uint64) (*models.Purchase, error) {
	var p models.Purchase
	err := s.db.WithContext(ctx).Where("id = ? AND tenant_id = ?", id, tenantID).Take(&p).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return nil, apperr.ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	return &p, nil
}
