package database

import "time"

// The tables the first migration made, as they were then: the migrations that changed them
// later (frontDoor) start from these, so a new database and an upgraded one go through the
// same steps. Never edit them.

type v1Tenant struct {
	ID           uint64  `gorm:"primaryKey"`
	Name         string  `gorm:"size:255;not null"`
	SiteKey      string  `gorm:"size:64;not null;uniqueIndex:idx_tenants_site_key"`
	PSPAccountID *string `gorm:"column:psp_account_id;size:255;index:idx_tenants_psp_account_id"`
	CreatedAt    time.Time
	UpdatedAt    time.Time
}

func (v1Tenant) TableName() string { return "tenants" }

type v1AudienceMember struct {
	ID        uint64 `gorm:"primaryKey"`
	TenantID  uint64 `gorm:"not null;uniqueIndex:audience_members_tenant_email_unique,priority:1"`
	Email     string `gorm:"size:255;not null;uniqueIndex:audience_members_tenant_email_unique,priority:2"`
	Name      string `gorm:"size:255;not null;default:''"`
	CreatedAt time.Time
	UpdatedAt time.Time
}

func (v1AudienceMember) TableName() string { return "audience_members" }

type v1Product struct {
	ID        uint64 `gorm:"primaryKey"`
	TenantID  uint64 `gorm:"not null;index:idx_products_tenant_id"`
	Name      string `gorm:"size:255;not null"`
	Amount    int64  `gorm:"not null"`
	Currency  string `gorm:"size:3;not null"`
	CreatedAt time.Time
	UpdatedAt time.Time
}

func (v1Product) TableName() string { return "products" }

// Purchases and entitlements as migrations 2026112102 and 2026112302 made them, before
// tenantKeys made their unique keys per tenant.

type v1Purchase struct {
	ID                   uint64 `gorm:"primaryKey"`
	TenantID             uint64 `gorm:"not null;index:idx_purchases_tenant_id"`
	AudienceMemberID     uint64 `gorm:"not null;index:idx_purchases_audience_member_id"`
	ProductID            uint64 `gorm:"not null"`
	PSPCheckoutSessionID string `gorm:"column:psp_checkout_session_id;size:255;not null;uniqueIndex:idx_purchases_psp_checkout_session_id"`
	PSPPaymentIntentID   string `gorm:"column:psp_payment_intent_id;size:255;not null;default:'';index:idx_purchases_psp_payment_intent_id"`
	AmountTotal          int64  `gorm:"not null"`
	Currency             string `gorm:"size:3;not null"`
	Status               string `gorm:"size:16;not null;default:'paid'"`
	CreatedAt            time.Time
	UpdatedAt            time.Time
}

func (v1Purchase) TableName() string { return "purchases" }

type v1Entitlement struct {
	ID               uint64 `gorm:"primaryKey"`
	TenantID         uint64 `gorm:"not null;index:idx_entitlements_tenant_id"`
	AudienceMemberID uint64 `gorm:"not null;index:idx_entitlements_audience_member_id"`
	ProductID        uint64 `gorm:"not null"`
	PurchaseID       uint64 `gorm:"not null;uniqueIndex:idx_entitlements_purchase_id"`
	RevokedAt        *time.Time
	CreatedAt        time.Time
	UpdatedAt        time.Time
}

func (v1Entitlement) TableName() string { return "entitlements" }
