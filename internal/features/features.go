// Package features stores per-tenant feature flags in Laravel Pennant's table and answers
// "is it active?" from a short cache.
package features

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/eventq/eventq/internal/breaker"
	"github.com/eventq/eventq/internal/cache"
	"github.com/eventq/eventq/internal/clock"
	"github.com/eventq/eventq/internal/database"

	"github.com/eventq/eventq/models"
)

// UseQueueEvents enables writing a tenant's events to its queue and reading them back.
const UseQueueEvents = "UseQueueEvents"

// AnonymizeIp stores and queues a tenant's visitors' addresses shortened (IPv4 /24, IPv6 /48).
const AnonymizeIp = "AnonymizeIp"

// Known lists the features that can be switched.
var Known = []string{UseQueueEvents, AnonymizeIp}

// CacheTTL bounds how long a flag value is trusted: a change reaches every api process within
// a second (the contract's bound), with room for the request that reads it.
const CacheTTL = 500 * time.Millisecond

// ErrUnknownFeature is returned for a name not in Known.
var ErrUnknownFeature = errors.New("unknown feature")

// Scope is Pennant's serialized scope for a tenant.
func Scope(tenantID uint64) string { return fmt.Sprintf("%s|%d", models.TenantMorphType, tenantID) }

// Queueing answers the one question UseQueueEvents decides: are this tenant's events queued?
// Ingestion, the re-pusher, queue reads and trims, fulfilment and revocation all ask it, and
// nothing else, so the rule lives in one place (Flags.Queues).
type Queueing interface {
	Queues(ctx context.Context, tenantID uint64) (bool, error)
}

// Flags reads and writes flags. It is safe for concurrent use.
type Flags struct {
	db    *gorm.DB
	clock clock.Clock
	cache *cache.Fallback[string, bool] // answers from memory while the database is down
}

// New returns Flags on db; clk times the cache and the rows' updated_at.
func New(db *gorm.DB, clk clock.Clock) *Flags {
	return &Flags{db: db, clock: clk, cache: cache.NewFallback[string, bool](CacheTTL, clk, database.LookupTimeout, database.ColdLookupTimeout,
		&breaker.Breaker{Cooldown: database.DownCooldown}, database.Unavailable)}
}

// Queues reports whether tenantID's events go to its queue: UseQueueEvents is active.
func (f *Flags) Queues(ctx context.Context, tenantID uint64) (bool, error) {
	return f.Active(ctx, UseQueueEvents, tenantID)
}

// Anonymizes reports whether tenantID's visitors' addresses are stored shortened: AnonymizeIp
// is active.
func (f *Flags) Anonymizes(ctx context.Context, tenantID uint64) (bool, error) {
	return f.Active(ctx, AnonymizeIp, tenantID)
}

// Active reports whether feature is on for tenantID. Flags are opt-in: no row means off.
func (f *Flags) Active(ctx context.Context, feature string, tenantID uint64) (bool, error) {
	return f.cache.Get(ctx, feature+"\x00"+Scope(tenantID), func(ctx context.Context) (bool, error) {
		var row models.Feature
		err := f.db.WithContext(ctx).Where("name = ? AND scope = ?", feature, Scope(tenantID)).Take(&row).Error
		switch {
		case errors.Is(err, gorm.ErrRecordNotFound):
			return false, nil
		case err != nil:
			return false, fmt.Errorf("features: %w", err)
		}
		return row.Value == "true", nil
	})
}

// ActiveTenants lists the tenants feature is on for, read from the database (no cache).
func (f *Flags) ActiveTenants(ctx context.Context, feature string) ([]uint64, error) {
	var rows []models.Feature
	if err := f.db.WithContext(ctx).Where("name = ? AND value = ?", feature, "true").Order("id").Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("features: %w", err)
	}
	var ids []uint64
	for _, r := range rows {
		if _, id, ok := strings.Cut(r.Scope, "|"); ok {
			if n, err := strconv.ParseUint(id, 10, 64); err == nil {
				ids = append(ids, n)
			}
		}
	}
	return ids, nil
}

// Set stores feature's value for tenantID (an upsert on name+scope).
func (f *Flags) Set(ctx context.Context, feature string, tenantID uint64, active bool) error {
	if !isKnown(feature) {
		return fmt.Errorf("%w: %q", ErrUnknownFeature, feature)
	}
	value := "false"
	if active {
		value = "true"
	}
	row := models.Feature{Name: feature, Scope: Scope(tenantID), Value: value}
	err := f.db.WithContext(ctx).Clauses(clause.OnConflict{
		Columns:   []clause.Column{{Name: "name"}, {Name: "scope"}},
		DoUpdates: clause.Assignments(map[string]any{"value": value, "updated_at": f.clock.Now().UTC()}),
	}).Create(&row).Error
	if err != nil {
		return fmt.Errorf("features: set: %w", err)
	}
	f.cache.Remove(feature + "\x00" + Scope(tenantID))
	return nil
}

// OfTenants reads every known feature of the tenants ids, from the database (no cache): a
// map from tenant id to feature to value, every known feature present (false when unset).
func (f *Flags) OfTenants(ctx context.Context, ids []uint64) (map[uint64]map[string]bool, error) {
	out := make(map[uint64]map[string]bool, len(ids))
	scopes := make([]string, len(ids))
	for i, id := range ids {
		out[id] = map[string]bool{}
		for _, k := range Known {
			out[id][k] = false
		}
		scopes[i] = Scope(id)
	}
	if len(ids) == 0 {
		return out, nil
	}
	var rows []models.Feature
	if err := f.db.WithContext(ctx).Where("scope IN ? AND name IN ?", scopes, Known).Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("features: %w", err)
	}
	for _, r := range rows {
		if _, id, ok := strings.Cut(r.Scope, "|"); ok {
			if n, err := strconv.ParseUint(id, 10, 64); err == nil && out[n] != nil {
				out[n][r.Name] = r.Value == "true"
			}
		}
	}
	return out, nil
}

// IsKnown reports whether feature is one of Known.
func IsKnown(feature string) bool { return isKnown(feature) }

func isKnown(feature string) bool {
	for _, k := range Known {
		if k == feature {
			return true
		}
	}
	return false
}
