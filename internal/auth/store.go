package auth

import (
	"context"
	"fmt"
	"slices"
	"time"

	"gorm.io/gorm"

	"github.com/eventq/eventq/internal/apperr"
	"github.com/eventq/eventq/internal/clock"
	"github.com/eventq/eventq/internal/validate"
	"github.com/eventq/eventq/models"
)

// ErrTokenNotFound is the answer for revoking a token that does not exist.
var ErrTokenNotFound = &apperr.Error{Code: apperr.NotFound, Message: "Not Found."}

// CreateToken issues a token for tenantID and returns its row and the plain "<id>|<secret>",
// which is shown once and never stored. A nil expiresAt never expires.
func CreateToken(ctx context.Context, db *gorm.DB, tenantID uint64, name string, abilities []string, expiresAt *time.Time) (*models.PersonalAccessToken, string, error) {
	secret, err := NewSecret()
	if err != nil {
		return nil, "", err
	}
	enc := EncodeAbilities(abilities)
	row := &models.PersonalAccessToken{
		TokenableType: models.TenantMorphType, TokenableID: tenantID, Name: name,
		Token: HashSecret(secret), Abilities: &enc, ExpiresAt: expiresAt,
	}
	if err := db.WithContext(ctx).Create(row).Error; err != nil {
		return nil, "", fmt.Errorf("auth: create token: %w", err)
	}
	return row, fmt.Sprintf("%d|%s", row.ID, secret), nil
}

// RevokeToken deletes the token, as Sanctum does. Processes that cached it refuse it within
// CacheTTL.
func RevokeToken(ctx context.Context, db *gorm.DB, id uint64) error {
	res := db.WithContext(ctx).Delete(&models.PersonalAccessToken{}, id)
	if res.Error != nil {
		return fmt.Errorf("auth: revoke token: %w", res.Error)
	}
	if res.RowsAffected == 0 {
		return ErrTokenNotFound
	}
	return nil
}

// TokenJSON is a token as the operator API lists it: never its secret.
type TokenJSON struct {
	ID         string   `json:"id"`
	Name       string   `json:"name"`
	Abilities  []string `json:"abilities"`
	LastUsedAt *string  `json:"last_used_at"`
	ExpiresAt  *string  `json:"expires_at"`
	CreatedAt  string   `json:"created_at"`
}

// ViewToken renders row without its secret.
func ViewToken(row *models.PersonalAccessToken) TokenJSON {
	opt := func(t *time.Time) *string {
		if t == nil {
			return nil
		}
		s := models.FormatTime(*t)
		return &s
	}
	return TokenJSON{ID: models.FormatID(row.ID), Name: row.Name, Abilities: decodeAbilities(row.Abilities),
		LastUsedAt: opt(row.LastUsedAt), ExpiresAt: opt(row.ExpiresAt), CreatedAt: models.FormatTime(row.CreatedAt)}
}

// ListTokens returns tenantID's tokens by id.
func ListTokens(ctx context.Context, db *gorm.DB, tenantID uint64) ([]models.PersonalAccessToken, error) {
	var rows []models.PersonalAccessToken
	err := db.WithContext(ctx).Where("tokenable_type = ? AND tokenable_id = ?", models.TenantMorphType, tenantID).
		Order("id").Find(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("auth: list tokens: %w", err)
	}
	return rows, nil
}

// TokenInput is a token to create, validated by ParseTokenInput.
type TokenInput struct {
	Name      string
	Abilities []string
	ExpiresAt *time.Time
}

// maxTokenName is the longest token name (Sanctum's column).
const maxTokenName = 255

// ParseTokenInput applies the operator API's rules to a request body: name optional (default
// "api"), abilities a list of known abilities (default ["*"]), expires_at a date after now.
func ParseTokenInput(in map[string]any, now time.Time) (TokenInput, error) {
	var errs apperr.FieldErrors
	out := TokenInput{Name: "api", Abilities: []string{AbilityAll}}
	if name := validate.NullableString(&errs, "name", in["name"], maxTokenName); name != nil {
		out.Name = *name
	}
	// Present, abilities must name at least one: an empty or null list is refused, never
	// taken as the default (every ability), as Laravel's "sometimes|required|array" does.
	if v, present := in["abilities"]; present {
		if list, isList := v.([]any); v == nil || (isList && len(list) == 0) {
			validate.Required(&errs, "abilities")
		} else if list, ok := validate.StringList(&errs, "abilities", v, len(KnownAbilities), 64, nil); ok {
			for i, a := range list {
				if !slices.Contains(KnownAbilities, a) {
					errs.Add(fmt.Sprintf("abilities.%d", i), fmt.Sprintf("The selected abilities.%d is invalid.", i))
					ok = false
				}
			}
			if ok {
				out.Abilities = list
			}
		}
	}
	if v := in["expires_at"]; v != nil {
		s, isString := v.(string)
		t, err := time.Parse(time.RFC3339, s)
		switch {
		case !isString || err != nil:
			validate.Add(&errs, "expires_at", "must be a valid date.")
			validate.Add(&errs, "expires_at", "must be a date after now.")
		case !t.After(now):
			validate.Add(&errs, "expires_at", "must be a date after now.")
		default:
			t = t.UTC()
			out.ExpiresAt = &t
		}
	}
	return out, errs.Err()
}

// Tokens is the one service for tenants' tokens, used by the operator API and the CLI.
type Tokens struct {
	db    *gorm.DB
	clock clock.Clock
}

// NewTokens returns Tokens on db; clk decides what "after now" is for an expiry.
func NewTokens(db *gorm.DB, clk clock.Clock) *Tokens { return &Tokens{db: db, clock: clk} }

// Parse validates a request body (ParseTokenInput) against the service's clock.
func (t *Tokens) Parse(in map[string]any) (TokenInput, error) {
	return ParseTokenInput(in, t.clock.Now())
}

// Create issues a token for tenantID; the plain "<id>|<secret>" is returned once.
func (t *Tokens) Create(ctx context.Context, tenantID uint64, in TokenInput) (*models.PersonalAccessToken, string, error) {
	return CreateToken(ctx, t.db, tenantID, in.Name, in.Abilities, in.ExpiresAt)
}

// List returns tenantID's tokens by id.
func (t *Tokens) List(ctx context.Context, tenantID uint64) ([]models.PersonalAccessToken, error) {
	return ListTokens(ctx, t.db, tenantID)
}

// Revoke deletes token id (ErrTokenNotFound when there is none); every process refuses it
// within CacheTTL.
func (t *Tokens) Revoke(ctx context.Context, id uint64) error { return RevokeToken(ctx, t.db, id) }
