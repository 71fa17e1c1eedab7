package payments

import (
	"context"
	"errors"

	"gorm.io/gorm"

	"github.com/eventq/eventq/internal/apperr"
	"github.com/eventq/eventq/internal/psp"
	"github.com/eventq/eventq/models"
)

// maxSessionID is the longest session id Return accepts.
const maxSessionID = 255

// Checkout is a Checkout Session created by CreateCheckout: the member pays at URL.
type Checkout struct {
	ID  string
	URL string
}

// CreateCheckout creates a payment Checkout Session with the provider, on tenantID's connected
// account (the platform's when it has none), for one product and member of the tenant, with
// the metadata fulfilment resolves and a success URL that leads to the return page. A member
// or product that is not the tenant's (0 included), or a withdrawn product, is an apperr.Invalid error with field
// errors, and the provider hears nothing; provider failures are psp's errors (ErrNoKey,
// ErrProvider).
func (svc *Service) CreateCheckout(ctx context.Context, tenantID, memberID, productID uint64, cancelURL string) (Checkout, error) {
	db := svc.DB.WithContext(ctx)
	var (
		tenant  models.Tenant
		member  models.AudienceMember
		product models.Product
		errs    apperr.FieldErrors
	)
	if err := db.Take(&tenant, tenantID).Error; err != nil {
		return Checkout{}, err
	}
	if err := tenantRow(db, &member, memberID, tenantID); err != nil {
		errs.Add("audience_member_id", "The selected audience member id is invalid.")
	}
	if err := tenantRow(db, &product, productID, tenantID); err != nil || !product.Active { // withdrawn: not for sale
		errs.Add("product_id", "The selected product id is invalid.")
	}
	if err := errs.Err(); err != nil {
		return Checkout{}, err
	}
	cs, err := svc.PSP.CreateCheckoutSession(ctx, psp.CheckoutParams{
		Account: tenant.Account(), ProductName: product.Name, Amount: product.Amount, Currency: product.Currency,
		CustomerEmail: member.Email, CancelURL: cancelURL, SuccessURL: SuccessURL(svc.AppURL, tenant.ID),
		ClientReferenceID: models.FormatID(member.ID), Metadata: Metadata(tenant.ID, member.ID, product.ID),
	})
	if err != nil {
		return Checkout{}, err
	}
	return Checkout{ID: cs.ID, URL: cs.URL}, nil
}

// tenantRow loads into dst the row id of tenantID; id 0 is not found.
func tenantRow(db *gorm.DB, dst any, id, tenantID uint64) error {
	if id == 0 {
		return gorm.ErrRecordNotFound
	}
	return db.Where("id = ? AND tenant_id = ?", id, tenantID).Take(dst).Error
}

// Return is the return page's work, where the provider sends the member after paying: it
// retrieves sessionID from the provider as tenantID's account and fulfils it (fulfil),
// as the worker does. An unknown tenant or session, a session whose metadata names another
// tenant, or one that can never be fulfilled is apperr.ErrNotFound; provider failures are psp's
// errors. A session not paid yet reports StatusPending.
//
// A session already fulfilled is answered from the database; the provider is asked about one
// session at most once per ReturnInterval by this process, visits in between getting the last
// answer.
func (svc *Service) Return(ctx context.Context, tenantID uint64, sessionID string) (Result, error) {
	if !plausibleSessionID(sessionID) {
		return Result{}, apperr.ErrNotFound
	}
	if res, ok, err := svc.fulfilledReturn(ctx, tenantID, sessionID); ok || err != nil {
		return res, err
	}
	return svc.Returns.answer(returnKey{tenantID, sessionID}, func() (Result, error) {
		return svc.returnFromProvider(ctx, tenantID, sessionID)
	})
}

// plausibleSessionID reports whether id can be a provider's session id: printable ASCII of at
// most maxSessionID bytes. Anything else names no session, and never reaches the database
// (Postgres refuses a NUL or invalid UTF-8 in a text parameter) or the provider.
func plausibleSessionID(id string) bool {
	if id == "" || len(id) > maxSessionID {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] <= ' ' || id[i] > '~' {
			return false
		}
	}
	return true
}

// returnFromProvider is Return's work once the database has no purchase of the session.
func (svc *Service) returnFromProvider(ctx context.Context, tenantID uint64, sessionID string) (Result, error) {
	var tenant models.Tenant
	if err := svc.DB.WithContext(ctx).Take(&tenant, tenantID).Error; err != nil {
		if errors.Is(err, gorm.ErrRecordNotFound) {
			return Result{}, apperr.ErrNotFound
		}
		return Result{}, err
	}
	account := tenant.Account()
	cs, err := svc.PSP.GetCheckoutSession(ctx, account, sessionID)
	if err != nil {
		return Result{}, err
	}
	if cs.Metadata[MetaTenant] != models.FormatID(tenant.ID) {
		return Result{}, apperr.ErrNotFound
	}
	res, err := svc.fulfil(ctx, SessionOf(cs, account))
	if errors.Is(err, ErrRejected) {
		svc.Log.Warn("return page: checkout not fulfilled", "session_id", cs.ID, "reason", err.Error())
		return Result{}, apperr.ErrNotFound
	}
	return res, err
}
