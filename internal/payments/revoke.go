package payments

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/eventq/eventq/internal/database"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/eventq/eventq/models"
)

// Outcomes of a refund or dispute (HandleEvent).
const (
	RevokeApplied = "revoked"         // this call ended the purchase and revoked its entitlement
	RevokeAlready = "already_revoked" // an earlier refund or dispute already ended it
	RevokeParked  = "parked"          // no purchase with that payment intent yet: kept for it
)

// Queue event types appended when a purchase ends.
const (
	EventPurchaseRefunded = "purchase_refunded"
	EventPurchaseDisputed = "purchase_disputed"
)

// reversal is a full refund or a dispute of one payment, as a charge.refunded or
// charge.dispute.created event reports it.
type reversal struct {
	Kind          string // models.PurchaseRefunded or models.PurchaseDisputed
	PaymentIntent string
	Account       string // the connected account the charge lives on; "" for the platform
	EventID       string
}

// revoke records r and applies it to the purchase of r.PaymentIntent on r.Account: the
// purchase gets status r.Kind, its entitlement is revoked and the tenant's queue gets a
// purchase_refunded or purchase_disputed event when UseQueueEvents is active. Exactly once per
// purchase, however often and concurrently it runs: a purchase already refunded or disputed is
// left as it is. When no such purchase exists yet, r is kept and applied by the fulfilment that
// creates it. Errors wrapping ErrRejected are permanent.
func (svc *Service) revoke(ctx context.Context, r reversal) (string, error) {
	out, err := svc.applyReversal(ctx, r)
	svc.Metrics.Revocation(outcome(err, out))
	return out, err
}

func (svc *Service) applyReversal(ctx context.Context, r reversal) (string, error) {
	if r.PaymentIntent == "" {
		return "", fmt.Errorf("revoke: %w: event %s names no payment intent", ErrRejected, r.EventID)
	}
	if r.Kind != models.PurchaseRefunded && r.Kind != models.PurchaseDisputed {
		return "", fmt.Errorf("revoke: %w: event %s: unknown reversal %q", ErrRejected, r.EventID, r.Kind)
	}
	row := models.PurchaseReversal{PSPPaymentIntentID: r.PaymentIntent, Kind: r.Kind, Account: r.Account, EventID: r.EventID}
	err := svc.DB.WithContext(ctx).Clauses(clause.OnConflict{
		Columns: []clause.Column{{Name: "psp_payment_intent_id"}, {Name: "kind"}, {Name: "account"}}, DoNothing: true,
	}).Create(&row).Error
	if err != nil {
		return "", fmt.Errorf("revoke: record reversal: %w", err)
	}
	p, err := svc.purchaseOf(ctx, r)
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return RevokeParked, nil
	}
	if err != nil {
		return "", fmt.Errorf("revoke: load purchase: %w", err)
	}
	var t models.Tenant
	if err := svc.DB.WithContext(ctx).Take(&t, p.TenantID).Error; err != nil {
		return "", fmt.Errorf("revoke: load tenant: %w", err)
	}
	if t.Account() != r.Account {
		return "", fmt.Errorf("revoke: %w: event %s on account %q, purchase %d belongs to %q", ErrRejected, r.EventID, r.Account, p.ID, t.Account())
	}
	applied, err := svc.applyReversals(ctx, &p, &t)
	if err != nil {
		return "", err
	}
	// Also when it was applied before: a retry after a failed announcement announces again.
	if err := svc.announce(ctx, p.TenantID, p.AudienceMemberID); err != nil {
		return "", err
	}
	if applied {
		return RevokeApplied, nil
	}
	return RevokeAlready, nil
}

// applyReversals applies, in one transaction, every recorded reversal of p's payment intent
// on tenant t's account that is not applied yet, then appends the resulting event to the
// queue. It reports whether p changed. Safe to run concurrently: the status update decides.
func (svc *Service) applyReversals(ctx context.Context, p *models.Purchase, t *models.Tenant) (bool, error) {
	if p.PSPPaymentIntentID == "" {
		return false, nil
	}
	var pending int64
	err := svc.DB.WithContext(ctx).Model(&models.PurchaseReversal{}).
		Where("psp_payment_intent_id = ? AND applied_at IS NULL", p.PSPPaymentIntentID).Count(&pending).Error
	if err != nil || pending == 0 { // the common case: nothing to apply, no transaction
		return false, err
	}
	queued, err := svc.Queueing.Queues(ctx, t.ID)
	if err != nil {
		return false, err
	}
	var event *models.TrackedEvent
	err = svc.DB.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		event, err = svc.applyReversalsTx(tx, p, t, queued)
		return err
	})
	if err != nil {
		return false, err
	}
	if event != nil && queued {
		svc.Ingest.PushPending(ctx, t.ID, append(svc.pendingCompletion(ctx, p), *event))
	}
	return event != nil, nil
}

// purchaseOf finds the purchase that r reverses, by its payment intent. A connected account
// is one tenant's, whose rows are read first; the platform's account is every tenant's
// without one, and the payment intent is looked up across them (database.AcrossTenants), as
// it is when the account's tenant has no such purchase (it may be another account's, which
// the caller refuses, or not stored yet).
func (svc *Service) purchaseOf(ctx context.Context, r reversal) (models.Purchase, error) {
	var p models.Purchase
	db := svc.DB.WithContext(ctx)
	if r.Account != "" {
		var t models.Tenant
		err := db.Where("psp_account_id = ?", r.Account).Take(&t).Error
		if err == nil {
			err = db.Where("tenant_id = ? AND psp_payment_intent_id = ?", t.ID, r.PaymentIntent).Take(&p).Error
		}
		if !errors.Is(err, gorm.ErrRecordNotFound) {
			return p, err
		}
	}
	err := database.AcrossTenants(db, func(tx *gorm.DB) error {
		return tx.Where("psp_payment_intent_id = ?", r.PaymentIntent).Take(&p).Error
	})
	return p, err
}

// pendingCompletion returns p's purchase_completed event when it is not known to be in its
// queue yet: the fulfilment that stored it may not have appended it when a reversal of the
// same purchase is applied beside it. Appending it first keeps the queue's order (completed,
// then refunded or disputed); appends skip an event already in the queue, so whether the
// fulfilment's own append comes first or later, the event is there once. On a database error
// it returns nothing: the requeue job appends the event later, after the reversal's.
func (svc *Service) pendingCompletion(ctx context.Context, p *models.Purchase) []models.TrackedEvent {
	at := p.CreatedAt.UTC()
	var rows []models.TrackedEvent
	err := svc.DB.WithContext(ctx).
		Where("tenant_id = ? AND created_at BETWEEN ? AND ? AND type = ? AND session_id = ? AND queue_pending = ?",
			p.TenantID, at.Add(-time.Second), at.Add(time.Second), EventPurchaseCompleted, p.PSPCheckoutSessionID, true).
		Find(&rows).Error
	if err != nil {
		svc.Log.Warn("purchase event not looked up", "purchase_id", p.ID, "error", err.Error())
		return nil
	}
	return rows
}

// applyReversalsTx is applyReversals inside tx; it returns the event it stored, if any.
func (svc *Service) applyReversalsTx(tx *gorm.DB, p *models.Purchase, t *models.Tenant, queued bool) (*models.TrackedEvent, error) {
	var rows []models.PurchaseReversal
	err := tx.Where("psp_payment_intent_id = ? AND account = ? AND applied_at IS NULL", p.PSPPaymentIntentID, t.Account()).
		Order("id").Find(&rows).Error
	if err != nil || len(rows) == 0 {
		return nil, err
	}
	now := svc.Clock.Now().UTC()
	var event *models.TrackedEvent
	for _, r := range rows {
		done := tx.Model(&models.PurchaseReversal{}).Where("id = ? AND applied_at IS NULL", r.ID).Update("applied_at", now)
		if done.Error != nil {
			return nil, fmt.Errorf("revoke: mark reversal: %w", done.Error)
		}
		if done.RowsAffected == 0 || event != nil { // applied concurrently, or the purchase already ended here
			continue
		}
		upd := tx.Model(&models.Purchase{}).Where("tenant_id = ? AND id = ? AND status = ?", p.TenantID, p.ID, models.PurchasePaid).
			Updates(map[string]any{"status": r.Kind, "updated_at": now})
		if upd.Error != nil {
			return nil, fmt.Errorf("revoke: end purchase: %w", upd.Error)
		}
		if upd.RowsAffected == 0 {
			continue // refunded or disputed before
		}
		err := tx.Model(&models.Entitlement{}).Where("tenant_id = ? AND purchase_id = ? AND revoked_at IS NULL", p.TenantID, p.ID).
			Updates(map[string]any{"revoked_at": now, "updated_at": now}).Error
		if err != nil {
			return nil, fmt.Errorf("revoke: entitlement: %w", err)
		}
		ev := svc.reversalEvent(t, p, r.Kind, now)
		ev.Queued, ev.QueuePending = queued, queued
		if err := svc.Events.In(tx).Insert(ev); err != nil {
			return nil, fmt.Errorf("revoke: reversal event: %w", err)
		}
		p.Status, event = r.Kind, &ev
	}
	return event, nil
}

// reversalEvent builds the purchase_refunded or purchase_disputed event of p. Its id is derived
// from the purchase's checkout session and the kind, so it is the same whoever builds it.
func (svc *Service) reversalEvent(t *models.Tenant, p *models.Purchase, kind string, at time.Time) models.TrackedEvent {
	typ := EventPurchaseRefunded
	if kind == models.PurchaseDisputed {
		typ = EventPurchaseDisputed
	}
	return svc.trackedEvent(typ, t.ID, p.AudienceMemberID, p.PSPCheckoutSessionID, at)
}
