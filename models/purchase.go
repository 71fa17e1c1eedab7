package models

import "time"

// Purchase statuses. A purchase starts paid; a full refund or a dispute ends it, once.
const (
	PurchasePaid     = "paid"
	PurchaseRefunded = "refunded"
	PurchaseDisputed = "disputed"
)

// Purchase is a fulfilled checkout. The checkout session id, unique within the tenant, is the
// guard that makes fulfilment happen once, whoever runs it (webhook worker or return page). Refunds and
// disputes find it by its payment intent.
type Purchase struct {
	ID                   uint64 `gorm:"primaryKey"`
	TenantID             uint64 `gorm:"not null;uniqueIndex:purchases_tenant_checkout_session,priority:1"`
	AudienceMemberID     uint64 `gorm:"not null;index"`
	ProductID            uint64 `gorm:"not null"`
	PSPCheckoutSessionID string `gorm:"column:psp_checkout_session_id;size:255;not null;uniqueIndex:purchases_tenant_checkout_session,priority:2"`
	PSPPaymentIntentID   string `gorm:"column:psp_payment_intent_id;size:255;not null;default:'';index"`
	AmountTotal          int64  `gorm:"not null"`
	Currency             string `gorm:"size:3;not null"`
	// Status is PurchasePaid, PurchaseRefunded or PurchaseDisputed.
	Status    string `gorm:"size:16;not null;default:'paid'"`
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Entitlement grants an audience member a product; one per purchase. It is in force while
// RevokedAt is nil; a refund or dispute of its purchase sets RevokedAt.
type Entitlement struct {
	ID               uint64 `gorm:"primaryKey"`
	TenantID         uint64 `gorm:"not null;uniqueIndex:entitlements_tenant_purchase,priority:1"`
	AudienceMemberID uint64 `gorm:"not null;index"`
	ProductID        uint64 `gorm:"not null"`
	PurchaseID       uint64 `gorm:"not null;uniqueIndex:entitlements_tenant_purchase,priority:2"`
	RevokedAt        *time.Time
	CreatedAt        time.Time
	UpdatedAt        time.Time
}

// PurchaseReversal records a full refund or a dispute the provider reported for a payment
// intent (Kind is PurchaseRefunded or PurchaseDisputed). It is applied to the purchase with
// that payment intent, on the same connected account, as soon as that purchase exists: at
// once, or when a late fulfilment creates it. One row per payment intent, kind and account.
type PurchaseReversal struct {
	ID                 uint64 `gorm:"primaryKey"`
	PSPPaymentIntentID string `gorm:"column:psp_payment_intent_id;size:255;not null;uniqueIndex:purchase_reversals_pi_kind_account"`
	Kind               string `gorm:"size:16;not null;uniqueIndex:purchase_reversals_pi_kind_account"`
	Account            string `gorm:"size:255;not null;default:'';uniqueIndex:purchase_reversals_pi_kind_account"`
	EventID            string `gorm:"size:255;not null"`
	AppliedAt          *time.Time
	CreatedAt          time.Time
}

// ReconcileMark remembers, per scope, up to when the provider's event list has been
// reconciled by a run that succeeded. The next run starts there, minus an overlap.
type ReconcileMark struct {
	Scope           string    `gorm:"primaryKey;size:64"`
	ReconciledUntil time.Time `gorm:"not null"`
	UpdatedAt       time.Time
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
