package psp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/client"

	"github.com/eventq/eventq/internal/apperr"
)

// requestTimeout bounds every provider call, retries included: a slow provider becomes a
// 502, not a hang.
const requestTimeout = 10 * time.Second

// ErrProvider is what callers see when the provider fails or cannot be reached.
var ErrProvider = &apperr.Error{Code: apperr.BadGateway, Message: "The payment provider could not be reached."}

// ErrSessionNotFound is returned for a session the provider does not know (on that account).
var ErrSessionNotFound = &apperr.Error{Code: apperr.NotFound, Message: "Not Found."}

// ErrNoKey is returned, before anything is sent, by every call of a Client built without a
// secret key: the service answers 503 rather than call the provider anonymously.
var ErrNoKey = &apperr.Error{Code: apperr.Unavailable, Message: "Service Unavailable."}

// Client makes provider API calls on behalf of connected accounts. A Client without a
// secret key sends nothing and fails every call with ErrNoKey.
type Client struct {
	api    *client.API
	hasKey bool
}

// NewClient returns a Client using secretKey; apiBase, when set, replaces the provider's API
// URL (tests point it at a local fake).
func NewClient(secretKey, apiBase string) *Client {
	cfg := &stripe.BackendConfig{
		HTTPClient:        &http.Client{Timeout: requestTimeout},
		MaxNetworkRetries: stripe.Int64(1),
		LeveledLogger:     &stripe.LeveledLogger{Level: stripe.LevelNull},
		EnableTelemetry:   stripe.Bool(false),
	}
	if apiBase != "" {
		cfg.URL = stripe.String(apiBase)
	}
	backends := &stripe.Backends{
		API:     stripe.GetBackendWithConfig(stripe.APIBackend, cfg),
		Connect: stripe.GetBackendWithConfig(stripe.ConnectBackend, cfg),
		Uploads: stripe.GetBackendWithConfig(stripe.UploadsBackend, cfg),
	}
	return &Client{api: client.New(secretKey, backends), hasKey: secretKey != ""}
}

// CheckoutParams describes a one-item payment Checkout Session.
type CheckoutParams struct {
	Account           string // connected account, "" for the platform
	ProductName       string
	Amount            int64
	Currency          string
	CustomerEmail     string // may be empty
	SuccessURL        string
	CancelURL         string
	ClientReferenceID string
	Metadata          map[string]string
}

// CreateCheckoutSession creates a Checkout Session in payment mode on params.Account.
func (c *Client) CreateCheckoutSession(ctx context.Context, p CheckoutParams) (*stripe.CheckoutSession, error) {
	if !c.hasKey {
		return nil, ErrNoKey
	}
	params := &stripe.CheckoutSessionParams{
		Mode:              stripe.String(string(stripe.CheckoutSessionModePayment)),
		SuccessURL:        stripe.String(p.SuccessURL),
		CancelURL:         stripe.String(p.CancelURL),
		ClientReferenceID: stripe.String(p.ClientReferenceID),
		LineItems: []*stripe.CheckoutSessionLineItemParams{{
			Quantity: stripe.Int64(1),
			PriceData: &stripe.CheckoutSessionLineItemPriceDataParams{
				Currency:    stripe.String(p.Currency),
				UnitAmount:  stripe.Int64(p.Amount),
				ProductData: &stripe.CheckoutSessionLineItemPriceDataProductDataParams{Name: stripe.String(p.ProductName)},
			},
		}},
	}
	if p.CustomerEmail != "" {
		params.CustomerEmail = stripe.String(p.CustomerEmail)
	}
	for k, v := range p.Metadata {
		params.AddMetadata(k, v)
	}
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	params.Context = ctx
	if p.Account != "" {
		params.SetStripeAccount(p.Account)
	}
	s, err := c.api.CheckoutSessions.New(params)
	if err != nil {
		return nil, fmt.Errorf("psp: create checkout session: %v: %w", err, ErrProvider)
	}
	return s, nil
}

// GetCheckoutSession retrieves session id as account ("" for the platform).
func (c *Client) GetCheckoutSession(ctx context.Context, account, id string) (*stripe.CheckoutSession, error) {
	if !c.hasKey {
		return nil, ErrNoKey
	}
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	params := &stripe.CheckoutSessionParams{}
	params.Context = ctx
	if account != "" {
		params.SetStripeAccount(account)
	}
	s, err := c.api.CheckoutSessions.Get(id, params)
	if err != nil {
		var se *stripe.Error
		if errors.As(err, &se) && se.HTTPStatusCode == http.StatusNotFound {
			return nil, ErrSessionNotFound
		}
		return nil, fmt.Errorf("psp: get checkout session: %v: %w", err, ErrProvider)
	}
	return s, nil
}
