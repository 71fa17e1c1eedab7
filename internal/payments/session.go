package payments

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"

	"github.com/stripe/stripe-go/v76"

	"github.com/eventq/eventq/models"
)

// The metadata keys a checkout session carries so that fulfilment can resolve it. Checkout
// writes them (Metadata); fulfilment and reconciliation read them.
const (
	MetaTenant  = "tenant_id"
	MetaMember  = "audience_member_id"
	MetaProduct = "product_id"
)

// Metadata returns the metadata of a checkout session of tenantID for memberID and productID.
func Metadata(tenantID, memberID, productID uint64) map[string]string {
	return map[string]string{
		MetaTenant: models.FormatID(tenantID), MetaMember: models.FormatID(memberID), MetaProduct: models.FormatID(productID),
	}
}

// SuccessURL is the success_url of tenantID's checkout sessions: the return page, with the
// provider's {CHECKOUT_SESSION_ID} placeholder, which the provider fills in.
func SuccessURL(appURL string, tenantID uint64) string {
	return returnURL(appURL, tenantID, "{CHECKOUT_SESSION_ID}")
}

// ReturnURL is the return page of session sessionID of tenantID: what SuccessURL becomes. It is
// the url of the events fulfilment and revocation record.
func ReturnURL(appURL string, tenantID uint64, sessionID string) string {
	return returnURL(appURL, tenantID, url.QueryEscape(sessionID))
}

func returnURL(appURL string, tenantID uint64, sessionParam string) string {
	return fmt.Sprintf("%s/checkout/return?tenant=%d&session_id=%s", appURL, tenantID, sessionParam)
}

// Session is what the flow needs of a provider Checkout Session; SessionOf makes one.
type Session struct {
	ID            string
	Account       string // the connected account the session lives on; "" for the platform
	PaymentStatus string // "paid", "unpaid" or "no_payment_required"
	PaymentIntent string
	AmountTotal   int64
	Currency      string
	Metadata      map[string]string
}

// SessionOf converts the provider's session cs, which lives on account ("" for the platform).
// It is the one place a provider session becomes a Session.
func SessionOf(cs *stripe.CheckoutSession, account string) Session {
	s := Session{
		ID: cs.ID, Account: account, PaymentStatus: string(cs.PaymentStatus),
		AmountTotal: cs.AmountTotal, Currency: string(cs.Currency), Metadata: cs.Metadata,
	}
	if cs.PaymentIntent != nil {
		s.PaymentIntent = cs.PaymentIntent.ID
	}
	return s
}

// decodeSession decodes ev's data.object as a session, which may lack an id.
func decodeSession(ev *stripe.Event) (Session, error) {
	if ev.Data == nil {
		return Session{}, errors.New("event without data")
	}
	var cs stripe.CheckoutSession
	if err := json.Unmarshal(ev.Data.Raw, &cs); err != nil {
		return Session{}, err
	}
	return SessionOf(&cs, ev.Account), nil
}
