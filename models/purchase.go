package models

import "time"

// Purchase is a fulfilled checkout. The unique checkout session id is the guard that makes
// fulfilment happen once, whoever runs it (webhook worker or return page).
type Purchase struct {
	ID                   uint64 `gorm:"primaryKey"`
	TenantID             uint64 `gorm:"not null;index"`
	AudienceMemberID     uint64 `gorm:"not null;index"`
	ProductID            uint64 `gorm:"not null"`
	PSPCheckoutSessionID string `gorm:"column:psp_checkout_session_id;size:255;not null;uniqueIndex"`
	PSPPaymentIntentID   string `gorm:"column:psp_payment_intent_id;size:255;not null;default:''"`
	AmountTotal          int64  `gorm:"not null"`
	Currency             string `gorm:"size:3;not null"`
	CreatedAt            time.Time
	UpdatedAt            time.Time
}

// Entitlement grants an audience member a product; one per purchase.
type Entitlement struct {
	ID               uint64 `gorm:"primaryKey"`
	TenantID         uint64 `gorm:"not null;index"`
	AudienceMemberID uint64 `gorm:"not null;index"`
	ProductID        uint64 `gorm:"not null"`
	PurchaseID       uint64 `gorm:"not null;uniqueIndex"`
	CreatedAt        time.Time
	UpdatedAt        time.Time
}

// WebhookInbox keeps a verified provider event whose enqueue failed (Redis was unreachable)
// until the worker enqueues it. EventID is unique: a redelivery while it waits adds nothing.
type WebhookInbox struct {
	ID        uint64 `gorm:"primaryKey"`
	EventID   string `gorm:"size:255;not null;uniqueIndex"`
	Type      string `gorm:"size:255;not null"`
	Payload   []byte `gorm:"not null"`
	CreatedAt time.Time
}

// TableName keeps GORM from pluralising "inbox" oddly.
func (WebhookInbox) TableName() string { return "webhook_inbox" }
