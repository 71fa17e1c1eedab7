package payments

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/eventq/eventq/models"
)

// Statuses a fulfilment reports (Return, HandleEvent).
const (
	StatusFulfilled        = "fulfilled"         // this call created the purchase
	StatusAlreadyFulfilled = "already_fulfilled" // an earlier or concurrent call did
	StatusPending          = "pending"           // not paid yet (delayed payment methods)
)

// EventPurchaseCompleted is the tracked event recorded with every purchase.
const EventPurchaseCompleted = "purchase_completed"

// Result is the outcome of a fulfilment: of Return, or of a checkout event.
type Result struct {
	Status     string
	PurchaseID uint64 // 0 while pending
}

// fulfil fulfils s if it is paid: the work of a checkout event (HandleEvent) and of the return
// page (Return). Purchase, entitlement and event are written in one
// transaction, so a crash leaves either all or nothing and a retry completes it; a session
// already fulfilled reports StatusAlreadyFulfilled and changes nothing. The event is appended
// to the tenant's queue after the commit when UseQueueEvents is active (a failed append is
// retried by the worker's requeue job). Errors wrapping ErrRejected are permanent.
func (svc *Service) fulfil(ctx context.Context, s Session) (Result, error) {
	res, err := svc.fulfilSession(ctx, s)
	svc.Metrics.Fulfilment(outcome(err, res.Status))
	return res, err
}

func (svc *Service) fulfilSession(ctx context.Context, s Session) (Result, error) {
	tenant, member, product, err := svc.resolve(ctx, s)
	if err != nil {
		return Result{}, err
	}
	if s.PaymentStatus != "paid" && s.PaymentStatus != "no_payment_required" {
		var p models.Purchase
		if err := svc.DB.WithContext(ctx).Where("psp_checkout_session_id = ?", s.ID).Take(&p).Error; err == nil {
			return Result{Status: StatusAlreadyFulfilled, PurchaseID: p.ID}, nil
		}
		return Result{Status: StatusPending}, nil
	}
	queued, err := svc.Queueing.Queues(ctx, tenant.ID)
	if err != nil {
		return Result{}, err
	}

	var (
		res      Result
		event    models.TrackedEvent
		reversal *models.TrackedEvent
		purchase models.Purchase
	)
	err = svc.DB.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		p := models.Purchase{
			TenantID: tenant.ID, AudienceMemberID: member.ID, ProductID: product.ID,
			PSPCheckoutSessionID: s.ID, PSPPaymentIntentID: s.PaymentIntent,
			AmountTotal: s.AmountTotal, Currency: s.Currency,
		}
		ins := tx.Clauses(clause.OnConflict{Columns: []clause.Column{{Name: "psp_checkout_session_id"}}, DoNothing: true}).Create(&p)
		if ins.Error != nil {
			return fmt.Errorf("fulfil: purchase: %w", ins.Error)
		}
		if ins.RowsAffected == 0 { // another fulfilment committed it first, with all its parts
			if err := tx.Where("psp_checkout_session_id = ?", s.ID).Take(&p).Error; err != nil {
				return fmt.Errorf("fulfil: load purchase: %w", err)
			}
			res = Result{Status: StatusAlreadyFulfilled, PurchaseID: p.ID}
			return nil
		}
		res = Result{Status: StatusFulfilled, PurchaseID: p.ID}
		ent := models.Entitlement{TenantID: tenant.ID, AudienceMemberID: member.ID, ProductID: product.ID, PurchaseID: p.ID}
		if err := tx.Create(&ent).Error; err != nil {
			return fmt.Errorf("fulfil: entitlement: %w", err)
		}
		event = svc.purchaseEvent(tenant, member, &p, s)
		event.Queued, event.QueuePending = queued, queued
		if err := tx.Create(&event).Error; err != nil {
			return fmt.Errorf("fulfil: event: %w", err)
		}
		purchase = p
		// A refund or dispute that arrived before this fulfilment applies now, atomically.
		reversal, err = svc.applyReversalsTx(tx, &purchase, tenant, queued)
		return err
	})
	if err != nil {
		return Result{}, err
	}
	if res.Status == StatusFulfilled && queued {
		pushed := []models.TrackedEvent{event}
		if reversal != nil {
			pushed = append(pushed, *reversal)
		}
		svc.Ingest.PushPending(ctx, tenant.ID, pushed)
	}
	// A reversal recorded while this transaction ran (it could not see the purchase, nor this
	// transaction the reversal) is applied here; applying is idempotent.
	if purchase.ID == 0 {
		if err := svc.DB.WithContext(ctx).Take(&purchase, res.PurchaseID).Error; err != nil {
			return Result{}, fmt.Errorf("fulfil: load purchase: %w", err)
		}
	}
	if _, err := svc.applyReversals(ctx, &purchase, tenant); err != nil {
		return Result{}, err
	}
	return res, nil
}

// resolve finds the tenant, member and product that s's metadata names, in one round trip.
// The member and product are returned with their ids only: fulfilment needs nothing else of
// them. A name that does not resolve, or a session on another account than the tenant's, is a
// permanent failure.
func (svc *Service) resolve(ctx context.Context, s Session) (*models.Tenant, *models.AudienceMember, *models.Product, error) {
	ids := make(map[string]uint64, 3)
	for _, key := range []string{MetaTenant, MetaMember, MetaProduct} {
		id, ok := models.ParseID(s.Metadata[key])
		if !ok {
			return nil, nil, nil, fmt.Errorf("fulfil: %w: session %s: metadata %s missing or invalid", ErrRejected, s.ID, key)
		}
		ids[key] = id
	}
	var row struct {
		models.Tenant
		MemberID  *uint64
		ProductID *uint64
	}
	res := svc.DB.WithContext(ctx).Raw(`SELECT t.*,
		(SELECT m.id FROM audience_members m WHERE m.id = ? AND m.tenant_id = t.id) AS member_id,
		(SELECT p.id FROM products p WHERE p.id = ? AND p.tenant_id = t.id) AS product_id
		FROM tenants t WHERE t.id = ?`, ids[MetaMember], ids[MetaProduct], ids[MetaTenant]).Scan(&row)
	if res.Error != nil {
		return nil, nil, nil, fmt.Errorf("fulfil: %w", res.Error)
	}
	t := &row.Tenant
	if res.RowsAffected == 0 {
		return nil, nil, nil, notFound(t, ids[MetaTenant])
	}
	if account := t.Account(); account != s.Account {
		return nil, nil, nil, fmt.Errorf("fulfil: %w: session %s on account %q, tenant %d has %q", ErrRejected, s.ID, s.Account, t.ID, account)
	}
	m := &models.AudienceMember{ID: ids[MetaMember], TenantID: t.ID}
	if row.MemberID == nil {
		return nil, nil, nil, notFound(m, m.ID, t.ID)
	}
	p := &models.Product{ID: ids[MetaProduct], TenantID: t.ID}
	if row.ProductID == nil {
		return nil, nil, nil, notFound(p, p.ID, t.ID)
	}
	return t, m, p, nil
}

// notFound is the permanent failure of a metadata id that names no row of dst's kind.
func notFound(dst any, ids ...any) error {
	return fmt.Errorf("fulfil: %w: %T not found (%v)", ErrRejected, dst, ids)
}

// purchaseEvent builds the purchase_completed event. Its id is derived from the purchase, so
// it is the same whoever builds it, and it sorts by the purchase's time.
func (svc *Service) purchaseEvent(t *models.Tenant, m *models.AudienceMember, p *models.Purchase, s Session) models.TrackedEvent {
	now := svc.Clock.Now().UTC()
	if !p.CreatedAt.IsZero() {
		now = p.CreatedAt.UTC()
	}
	return svc.trackedEvent(EventPurchaseCompleted, t.ID, m.ID, p.ID, s.ID, now)
}

// trackedEvent is an event eventq records about purchase purchaseID of memberID, made by
// checkout session sessionID: its page is the session's return page, and its id depends only on
// type, time and purchase, so every caller building it builds the same row.
func (svc *Service) trackedEvent(typ string, tenantID, memberID, purchaseID uint64, sessionID string, at time.Time) models.TrackedEvent {
	page := ReturnURL(svc.AppURL, tenantID, sessionID)
	u, _ := url.Parse(page)
	member := models.FormatID(memberID)
	return models.TrackedEvent{
		ID: eventID(typ, at, purchaseID), TenantID: tenantID, Type: typ, SessionID: sessionID,
		AudienceMemberID: &member, URL: page, PageHostname: u.Hostname(), PagePath: u.EscapedPath(),
		UserAgent: "eventq", IPAddress: "", EventSequence: 0, CreatedAt: at,
	}
}

// eventID is a version-7 UUID whose time is at and whose other bits come from the event type
// and the purchase id.
func eventID(typ string, at time.Time, purchaseID uint64) string {
	var u uuid.UUID
	sum := sha256.Sum256([]byte(fmt.Sprintf("%s:%d", typ, purchaseID)))
	copy(u[:], sum[:])
	ms := uint64(at.UnixMilli())
	for i := 0; i < 6; i++ {
		u[i] = byte(ms >> (40 - 8*i))
	}
	u[6] = u[6]&0x0f | 0x70 // version 7
	u[8] = u[8]&0x3f | 0x80 // RFC 4122 variant
	return u.String()
}

// outcome is the metric label of a call that ended with err: "rejected", "error", or ok when
// it succeeded.
func outcome(err error, ok string) string {
	switch {
	case errors.Is(err, ErrRejected):
		return "rejected"
	case err != nil:
		return "error"
	}
	return ok
}
