package auth

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/eventq/eventq/internal/apperr"
	"github.com/eventq/eventq/models"
)

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
		return apperr.Errorf(apperr.NotFound, "token %d not found", id)
	}
	return nil
}
