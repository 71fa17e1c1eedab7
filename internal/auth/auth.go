package auth

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eventq/eventq/internal/breaker"
	"github.com/eventq/eventq/internal/cache"
	"gorm.io/gorm"

	"github.com/eventq/eventq/internal/apperr"
	"github.com/eventq/eventq/internal/clock"
	"github.com/eventq/eventq/internal/database"
	"github.com/eventq/eventq/models"
)

// CacheTTL bounds how long a token row is trusted without re-reading it: a revoked or expired
// token stops working on every process within this time, inside the contract's 4 s.
const CacheTTL = 3 * time.Second

// LastUsedInterval throttles last_used_at writes: at most one per token per interval and
// process.
const LastUsedInterval = time.Minute

// ErrUnauthenticated is returned for a missing, unknown, wrong or expired token.
var ErrUnauthenticated = &apperr.Error{Code: apperr.Unauthorized, Message: "Unauthenticated."}

// ErrInvalidAbility is returned when a valid token lacks the ability a route needs.
var ErrInvalidAbility = &apperr.Error{Code: apperr.Forbidden, Message: "Invalid ability provided."}

// Principal is an authenticated token: who it belongs to and what it may do.
type Principal struct {
	TokenID   uint64
	TenantID  uint64
	Abilities []string
}

// Can reports whether the principal's token grants ability.
func (p *Principal) Can(ability string) bool { return Can(p.Abilities, ability) }

type cachedToken struct {
	row       *models.PersonalAccessToken // nil: no such token
	abilities []string                    // row's, decoded once
	usedW     atomic.Int64                // unix nanos of this process's last last_used_at write
}

// Authenticator checks bearer tokens against personal_access_tokens, with a short cache.
// It is safe for concurrent use.
type Authenticator struct {
	db    *gorm.DB
	clock clock.Clock
	log   *slog.Logger
	cache *cache.Fallback[string, *cachedToken] // answers from memory while the database is down
	// unknown holds the tokens recently looked up and not found (by id when no row has the
	// id, else by key), apart from cache: a flood of made-up tokens costs one lookup each per
	// UnknownTTL, and never evicts the entries that answer real tokens while the database is
	// down.
	unknown *cache.TTL[string, struct{}]
	// writes are the last_used_at updates in flight (touch); Close waits for them.
	writes sync.WaitGroup
}

// NewAuthenticator returns an Authenticator reading db.
func NewAuthenticator(db *gorm.DB, clk clock.Clock, log *slog.Logger) *Authenticator {
	return &Authenticator{db: db, clock: clk, log: log,
		cache: cache.NewFallback[string, *cachedToken](CacheTTL, clk, database.LookupTimeout, database.ColdLookupTimeout,
			&breaker.Breaker{Cooldown: database.DownCooldown}, database.Unavailable),
		unknown: cache.New[string, struct{}](UnknownTTL, clk)}
}

// Bearer is a token as sent, split and hashed once for Known and Authenticate.
type Bearer struct {
	id, hash string
	ok       bool
}

// ParseBearer splits "<id>|<secret>" and hashes the secret.
func ParseBearer(token string) Bearer {
	id, secret, ok := splitToken(token)
	if !ok {
		return Bearer{}
	}
	return Bearer{id: id, hash: HashSecret(secret), ok: true}
}

// key is the cache key: a new token that reuses a deleted token's id is a new key.
func (b Bearer) key() string { return b.id + "|" + b.hash }

// UnknownTTL is how long a token found in no row is answered unknown without a lookup: a token
// id that no row has, whatever the secret sent with it (a token created meanwhile with that id
// is refused for at most this long), or an id and a secret that do not match its row.
const UnknownTTL = time.Second

// errNoToken is load's answer for a token no row matches: not cached with the rows (see
// unknown).
type errNoToken struct{ noID bool } // noID: no row has the id

func (errNoToken) Error() string { return "auth: no such token" }

// Known reports whether token is one that this process read from the database recently and
// found: Authenticate answers it from memory.
func (a *Authenticator) Known(token string) bool { return a.KnownBearer(ParseBearer(token)) }

// KnownBearer is Known of a parsed token.
func (a *Authenticator) KnownBearer(b Bearer) bool {
	if !b.ok {
		return false
	}
	entry, ok := a.cache.TTL.Get(b.key())
	return ok && entry.row != nil && subtle.ConstantTimeCompare([]byte(entry.row.Token), []byte(b.hash)) == 1
}

// Authenticate resolves "<id>|<secret>" to its principal. The secret is compared in constant
// time; expired tokens and tokens that do not belong to a tenant are refused. While the
// database is unreachable, a token read before is answered as it was then.
func (a *Authenticator) Authenticate(ctx context.Context, token string) (*Principal, error) {
	return a.AuthenticateBearer(ctx, ParseBearer(token))
}

// AuthenticateBearer is Authenticate of a parsed token.
func (a *Authenticator) AuthenticateBearer(ctx context.Context, b Bearer) (*Principal, error) {
	if !b.ok {
		return nil, ErrUnauthenticated
	}
	if _, ok := a.unknown.Get(b.key()); ok {
		return nil, ErrUnauthenticated
	}
	if _, ok := a.unknown.Get(b.id); ok && b.id != "" {
		return nil, ErrUnauthenticated
	}
	entry, err := a.cache.Get(ctx, b.key(), func(ctx context.Context) (*cachedToken, error) {
		row, err := a.load(ctx, b.id, b.hash)
		switch {
		case err != nil:
			return nil, err
		case row == nil:
			return nil, errNoToken{noID: true}
		case subtle.ConstantTimeCompare([]byte(row.Token), []byte(b.hash)) != 1:
			return nil, errNoToken{}
		}
		return &cachedToken{row: row, abilities: decodeAbilities(row.Abilities)}, nil
	})
	var none errNoToken
	if errors.As(err, &none) {
		if none.noID && b.id != "" {
			a.unknown.Add(b.id, struct{}{})
		} else {
			a.unknown.Add(b.key(), struct{}{})
		}
		return nil, ErrUnauthenticated
	}
	if err != nil {
		return nil, err
	}
	row := entry.row
	if row == nil || subtle.ConstantTimeCompare([]byte(row.Token), []byte(b.hash)) != 1 {
		return nil, ErrUnauthenticated
	}
	now := a.clock.Now()
	if row.ExpiresAt != nil && !now.Before(*row.ExpiresAt) {
		return nil, ErrUnauthenticated
	}
	if row.TokenableType != models.TenantMorphType {
		return nil, ErrUnauthenticated
	}
	a.touch(entry, now)
	return &Principal{TokenID: row.ID, TenantID: row.TokenableID, Abilities: entry.abilities}, nil
}

func (a *Authenticator) load(ctx context.Context, id, hash string) (*models.PersonalAccessToken, error) {
	var row models.PersonalAccessToken
	q := a.db.WithContext(ctx)
	if id != "" {
		n, ok := models.ParseID(id)
		if !ok {
			return nil, nil
		}
		q = q.Where("id = ?", n)
	} else {
		q = q.Where("token = ?", hash)
	}
	err := q.Take(&row).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("auth: load token: %w", err)
	}
	return &row, nil
}

// Close waits for the last_used_at updates in flight (each gives up after 5 s), so that none is
// cut off by the database closing under it.
func (a *Authenticator) Close() { a.writes.Wait() }

// touch writes last_used_at at most once per LastUsedInterval, off the request path.
func (a *Authenticator) touch(entry *cachedToken, now time.Time) {
	row := entry.row
	if row.LastUsedAt != nil && now.Sub(*row.LastUsedAt) < LastUsedInterval {
		return
	}
	prev := entry.usedW.Load()
	if now.UnixNano()-prev < int64(LastUsedInterval) || !entry.usedW.CompareAndSwap(prev, now.UnixNano()) {
		return
	}
	a.writes.Add(1)
	go func(id uint64) {
		defer a.writes.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err := a.db.WithContext(ctx).Model(&models.PersonalAccessToken{}).Where("id = ?", id).
			UpdateColumn("last_used_at", now.UTC()).Error
		if err != nil {
			a.log.Warn("auth: last_used_at update failed", "token_id", id, "err", err)
		}
	}(row.ID)
}
