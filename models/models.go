// Package models holds eventq's GORM models and the domain rules on them.
package models

import (
	"strconv"
	"time"
)

// TenantMorphType is the tokenable_type and the Pennant scope prefix a Laravel app writes for
// a tenant; kept so rows copied from the old service keep working.
const TenantMorphType = `App\Models\Tenant`

// Tenant is one creator site. SiteKey is public (embedded in pages); PSPAccountID is the
// tenant's connected account at the payment provider, when it has one.
//
// AllowedHostnames, when not empty, are the only page hostnames (and their subdomains) whose
// events POST /api/track accepts; RedactQueryParams are the query parameters whose values
// ingestion replaces. Both are stored as JSON lists (StringList).
type Tenant struct {
	ID                uint64     `gorm:"primaryKey"`
	Name              string     `gorm:"size:255;not null"`
	SiteKey           string     `gorm:"size:64;not null;uniqueIndex"`
	PSPAccountID      *string    `gorm:"column:psp_account_id;size:255;uniqueIndex:tenants_psp_account_id_unique"`
	AllowedHostnames  StringList `gorm:"type:text;not null;default:'[]'"`
	RedactQueryParams StringList `gorm:"type:text;not null;default:'[]'"`
	CreatedAt         time.Time
	UpdatedAt         time.Time
}

// Account is the tenant's connected account at the payment provider, or "" for the
// platform account.
func (t *Tenant) Account() string {
	if t.PSPAccountID == nil {
		return ""
	}
	return *t.PSPAccountID
}

// PersonalAccessToken is Laravel Sanctum's table, column for column. Token holds the hex
// SHA-256 of the secret part of "<id>|<secret>".
type PersonalAccessToken struct {
	ID            uint64     `gorm:"primaryKey"`
	TokenableType string     `gorm:"size:255;not null;index:personal_access_tokens_tokenable_type_tokenable_id_index,priority:1"`
	TokenableID   uint64     `gorm:"not null;index:personal_access_tokens_tokenable_type_tokenable_id_index,priority:2"`
	Name          string     `gorm:"size:255;not null"`
	Token         string     `gorm:"size:64;not null;uniqueIndex:personal_access_tokens_token_unique"`
	Abilities     *string    `gorm:"type:text"`
	LastUsedAt    *time.Time `gorm:"column:last_used_at"`
	ExpiresAt     *time.Time `gorm:"column:expires_at"`
	CreatedAt     time.Time
	UpdatedAt     time.Time
}

// Feature is Laravel Pennant's stored flag value: one row per feature name and scope.
type Feature struct {
	ID        uint64 `gorm:"primaryKey"`
	Name      string `gorm:"size:255;not null;uniqueIndex:features_name_scope_unique,priority:1"`
	Scope     string `gorm:"size:255;not null;uniqueIndex:features_name_scope_unique,priority:2"`
	Value     string `gorm:"type:text;not null"`
	CreatedAt time.Time
	UpdatedAt time.Time
}

// AudienceMember is a person known to one tenant. ExternalID is the tenant's own id for the
// person (unique within the tenant when set), so a site can name a member without storing
// eventq's id. Name "" is unset.
type AudienceMember struct {
	ID         uint64  `gorm:"primaryKey"`
	TenantID   uint64  `gorm:"not null;index:audience_members_tenant_email,priority:1;uniqueIndex:audience_members_tenant_external_unique,priority:1"`
	Email      string  `gorm:"size:255;not null;index:audience_members_tenant_email,priority:2"`
	Name       string  `gorm:"size:255;not null;default:''"`
	ExternalID *string `gorm:"size:191;uniqueIndex:audience_members_tenant_external_unique,priority:2"`
	// ErasedAt is when the member was erased: from then on it answers 404 everywhere, and its
	// personal fields are blank.
	ErasedAt  *time.Time
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Product is something a tenant sells, priced in minor units of Currency. Products are never
// deleted (purchases refer to them); Active false withdraws one from sale.
type Product struct {
	ID        uint64 `gorm:"primaryKey"`
	TenantID  uint64 `gorm:"not null"`
	Name      string `gorm:"size:255;not null"`
	Amount    int64  `gorm:"not null"`
	Currency  string `gorm:"size:3;not null"`
	Active    bool   `gorm:"not null;default:true"`
	CreatedAt time.Time
	UpdatedAt time.Time
}

// FormatID renders a numeric primary key the way every JSON document shows ids: as a string.
func FormatID(id uint64) string { return strconv.FormatUint(id, 10) }

// ParseID parses an id given as a string; ok is false for anything but the canonical decimal
// form of a positive integer below 2^63 (the databases' bigint): no sign, no leading zero, so
// that one id has one spelling (caches and invalidations are keyed by it).
func ParseID(s string) (uint64, bool) {
	if s == "" || s[0] == '0' || len(s) > 19 {
		return 0, false
	}
	id, err := strconv.ParseUint(s, 10, 63)
	return id, err == nil
}

// FormatTime renders a time the way every JSON document shows it: RFC 3339 in UTC, with a
// numeric offset (+00:00).
func FormatTime(t time.Time) string { return t.UTC().Format(TimeFormat) }
