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
	res, err := svc.fulfilSession(ctx, s, svc.Events.WritableCTE())
	svc.Metrics.Fulfilment(outcome(err, res.Status))
	return res, err
}

// fulfilSession is fulfil; oneStatement says whether the common case may be stored in one
// statement (storeOneStatement), where the store takes one.
func (svc *Service) fulfilSession(ctx context.Context, s Session, oneStatement bool) (Result, error) {
	r, err := refsOf(s)
	if err != nil {
		return Result{}, err
	}
	if s.PaymentStatus != "paid" && s.PaymentStatus != "no_payment_required" {
		if _, err := svc.resolve(ctx, s, r); err != nil {
			return Result{}, err
		}
		var p models.Purchase
		if err := svc.DB.WithContext(ctx).Where("tenant_id = ? AND psp_checkout_session_id = ?", r.tenant, s.ID).Take(&p).Error; err == nil {
			return Result{Status: StatusAlreadyFulfilled, PurchaseID: p.ID}, nil
		}
		return Result{Status: StatusPending}, nil
	}
	queued, err := svc.Queueing.Queues(ctx, r.tenant)
	if err != nil {
		return Result{}, err
	}

	st, err := svc.store(ctx, s, r, queued, oneStatement)
	if err != nil {
		return Result{}, err
	}
	res := st.res
	// The announcement needs only the commit above: it goes to Redis while the rest is done,
	// so that its round trip adds nothing to the fulfilment's. Also when it was fulfilled
	// before: a retry after a failed announcement announces again.
	announced := make(chan error, 1)
	go func() { announced <- svc.announce(ctx, r.tenant, r.member) }()
	if res.Status == StatusFulfilled && queued {
		pushed := []models.TrackedEvent{st.event}
		if st.reversal != nil {
			pushed = append(pushed, *st.reversal)
		}
		svc.Ingest.PushPending(ctx, r.tenant, pushed)
	}
	// A reversal recorded while this transaction ran (it could not see the purchase, nor this
	// transaction the reversal) is applied here; applying is idempotent.
	applied, err := svc.applyReversals(ctx, &st.purchase, r.tenantOn(s.Account))
	if aerr := <-announced; err == nil {
		err = aerr
	}
	if err != nil {
		return Result{}, err
	}
	if applied { // after the reversal's commit, which the announcement above may have preceded
		if err := svc.announce(ctx, r.tenant, r.member); err != nil {
			return Result{}, err
		}
	}
	return res, nil
}

// refs are the ids of the tenant, member and product that a session's metadata names.
type refs struct{ tenant, member, product uint64 }

// refsOf reads s's metadata; a missing or malformed id is a permanent failure.
func refsOf(s Session) (refs, error) {
	var ids [3]uint64
	for i, key := range []string{MetaTenant, MetaMember, MetaProduct} {
		id, ok := models.ParseID(s.Metadata[key])
		if !ok {
			return refs{}, fmt.Errorf("fulfil: %w: session %s: metadata %s missing or invalid", ErrRejected, s.ID, key)
		}
		ids[i] = id
	}
	return refs{tenant: ids[0], member: ids[1], product: ids[2]}, nil
}

// tenantOn is r's tenant with its id and connected account ("" for the platform): all that
// fulfilment needs of it once resolve, or the statement that stores it, has checked that the
// tenant is on account.
func (r refs) tenantOn(account string) *models.Tenant {
	t := &models.Tenant{ID: r.tenant}
	if account != "" {
		t.PSPAccountID = &account
	}
	return t
}

// stored is what storing a fulfilment found or wrote: the purchase, and, when this fulfilment
// stored it, its purchase_completed event and the event of a reversal that it applied.
type stored struct {
	res      Result
	purchase models.Purchase
	event    models.TrackedEvent
	reversal *models.TrackedEvent
}

// store checks that the tenant, member and product of r exist and that s is on the tenant's
// account, then writes s's purchase, entitlement and purchase_completed event in one
// transaction, and applies a reversal recorded before it in the same transaction. With
// oneStatement (a store that takes a write of several tables in one statement) the common
// case, no reversal waiting, is one statement (storeOneStatement); otherwise it is resolve and
// a transaction of several (storeTx).
func (svc *Service) store(ctx context.Context, s Session, r refs, queued, oneStatement bool) (stored, error) {
	if oneStatement {
		st, ok, err := svc.storeOneStatement(ctx, s, r, queued)
		if err != nil || ok {
			return st, err
		}
	}
	live, err := svc.resolve(ctx, s, r)
	if err != nil {
		return stored{}, err
	}
	return svc.storeTx(ctx, s, r, queued, live)
}

// newPurchase is the purchase of s, stamped now, and its purchase_completed event.
func (svc *Service) newPurchase(s Session, r refs, queued bool) (models.Purchase, models.TrackedEvent) {
	now := svc.Clock.Now().UTC()
	p := models.Purchase{
		TenantID: r.tenant, AudienceMemberID: r.member, ProductID: r.product,
		PSPCheckoutSessionID: s.ID, PSPPaymentIntentID: s.PaymentIntent,
		AmountTotal: s.AmountTotal, Currency: s.Currency, Status: models.PurchasePaid,
		CreatedAt: now, UpdatedAt: now,
	}
	ev := svc.trackedEvent(EventPurchaseCompleted, r.tenant, r.member, s.ID, now)
	ev.Queued, ev.QueuePending = queued, queued
	return p, ev
}

// storeTx is store's transaction of one statement a row, once resolve has checked r. A member
// erased before the payment (live false) gets the purchase, for the books, but no entitlement,
// and its purchase_completed event names no member.
func (svc *Service) storeTx(ctx context.Context, s Session, r refs, queued, live bool) (stored, error) {
	var st stored
	err := svc.DB.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		p, ev := svc.newPurchase(s, r, queued)
		if !live {
			ev.AudienceMemberID = nil
		}
		ins := tx.Clauses(clause.OnConflict{Columns: []clause.Column{{Name: "tenant_id"}, {Name: "psp_checkout_session_id"}}, DoNothing: true}).Create(&p)
		if ins.Error != nil {
			return fmt.Errorf("fulfil: purchase: %w", ins.Error)
		}
		if ins.RowsAffected == 0 { // another fulfilment committed it first, with all its parts
			return svc.alreadyStored(tx, s, r.tenant, &st)
		}
		if live {
			ent := models.Entitlement{TenantID: r.tenant, AudienceMemberID: r.member, ProductID: r.product, PurchaseID: p.ID, CreatedAt: p.CreatedAt, UpdatedAt: p.CreatedAt}
			if err := tx.Create(&ent).Error; err != nil {
				return fmt.Errorf("fulfil: entitlement: %w", err)
			}
		}
		if err := svc.Events.In(tx).Insert(ev); err != nil {
			return fmt.Errorf("fulfil: event: %w", err)
		}
		st = stored{res: Result{Status: StatusFulfilled, PurchaseID: p.ID}, purchase: p, event: ev}
		// A refund or dispute that arrived before this fulfilment applies now, atomically.
		var err error
		st.reversal, err = svc.applyReversalsTx(tx, &st.purchase, r.tenantOn(s.Account), queued)
		return err
	})
	return st, err
}

// alreadyStored fills st with the purchase of s that another fulfilment stored for tenant.
func (svc *Service) alreadyStored(db *gorm.DB, s Session, tenant uint64, st *stored) error {
	var p models.Purchase
	if err := db.Where("tenant_id = ? AND psp_checkout_session_id = ?", tenant, s.ID).Take(&p).Error; err != nil {
		return fmt.Errorf("fulfil: load purchase: %w", err)
	}
	*st = stored{res: Result{Status: StatusAlreadyFulfilled, PurchaseID: p.ID}, purchase: p}
	return nil
}

// resolve checks, in one round trip, that the tenant, member and product of r exist, the
// member and product on that tenant, and that s is on the tenant's account; anything else is
// a permanent failure. live is false when the member was erased.
func (svc *Service) resolve(ctx context.Context, s Session, r refs) (live bool, err error) {
	var row struct {
		models.Tenant
		MemberLive *bool // NULL: no such member of the tenant
		ProductID  *uint64
	}
	res := svc.DB.WithContext(ctx).Raw(`SELECT t.*,
		(SELECT m.erased_at IS NULL FROM audience_members m WHERE m.tenant_id = ? AND m.id = ?) AS member_live,
		(SELECT p.id FROM products p WHERE p.tenant_id = ? AND p.id = ?) AS product_id
		FROM tenants t WHERE t.id = ?`, r.tenant, r.member, r.tenant, r.product, r.tenant).Scan(&row)
	if res.Error != nil {
		return false, fmt.Errorf("fulfil: %w", res.Error)
	}
	t := &row.Tenant
	if res.RowsAffected == 0 {
		return false, notFound(t, r.tenant)
	}
	if account := t.Account(); account != s.Account {
		return false, fmt.Errorf("fulfil: %w: session %s on account %q, tenant %d has %q", ErrRejected, s.ID, s.Account, t.ID, account)
	}
	if row.MemberLive == nil {
		return false, notFound(&models.AudienceMember{}, r.member, t.ID)
	}
	if row.ProductID == nil {
		return false, notFound(&models.Product{}, r.product, t.ID)
	}
	return *row.MemberLive, nil
}

// notFound is the permanent failure of a metadata id that names no row of dst's kind.
func notFound(dst any, ids ...any) error {
	return fmt.Errorf("fulfil: %w: %T not found (%v)", ErrRejected, dst, ids)
}

// trackedEvent is an event eventq records about the purchase of memberID made by checkout
// session sessionID: its page is the session's return page, and its id depends only on type,
// time and session (one purchase a session), so every caller building it builds the same row.
func (svc *Service) trackedEvent(typ string, tenantID, memberID uint64, sessionID string, at time.Time) models.TrackedEvent {
	page := ReturnURL(svc.AppURL, tenantID, sessionID)
	u, _ := url.Parse(page)
	member := models.FormatID(memberID)
	return models.TrackedEvent{
		ID: eventID(typ, at, sessionID), TenantID: tenantID, Type: typ, SessionID: sessionID,
		AudienceMemberID: &member, URL: page, PageHostname: u.Hostname(), PagePath: u.EscapedPath(),
		UserAgent: "eventq", IPAddress: "", EventSequence: 0, CreatedAt: at,
	}
}

// eventID is a version-7 UUID whose time is at and whose other bits come from the event type
// and the checkout session. No caller rebuilds the id of a stored event, so how it is derived
// may change without a migration.
func eventID(typ string, at time.Time, sessionID string) string {
	var u uuid.UUID
	sum := sha256.Sum256([]byte(typ + ":" + sessionID))
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
