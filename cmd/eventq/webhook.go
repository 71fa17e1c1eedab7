package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"gorm.io/gorm"

	"github.com/eventq/eventq/internal/psp"
	"github.com/eventq/eventq/models"
)

// webhookTimeout bounds the whole delivery of `webhook send`.
const webhookTimeout = 10 * time.Second

// webhookSentJSON is what `webhook send` prints after a 2xx answer.
type webhookSentJSON struct {
	EventID           string `json:"event_id"`
	Type              string `json:"type"`
	CheckoutSessionID string `json:"checkout_session_id"`
	URL               string `json:"url"`
	Status            int    `json:"status"`
}

func (c *cli) webhookCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "webhook", Short: "Exercise the payment webhook"}
	var tenantID, memberID, productID, target, eventType string
	send := &cobra.Command{
		Use:   "send",
		Short: "Sign a realistic checkout event with PSP_WEBHOOK_SECRET and post it to the webhook",
		Long: "Builds a paid Checkout Session for the member and product, wraps it in an event as the\n" +
			"provider delivers it for the tenant's connected account, signs it with the first secret of\n" +
			"PSP_WEBHOOK_SECRET and posts it to --url (default APP_URL/api/webhooks/psp). Fails unless\n" +
			"the endpoint answers 2xx.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if strings.TrimSpace(eventType) == "" {
				return errors.New("--type must not be empty")
			}
			cfg, err := c.config()
			if err != nil {
				return err
			}
			if len(cfg.PSP.WebhookSecrets) == 0 {
				return errors.New("no webhook signing secret: set PSP_WEBHOOK_SECRET (or STRIPE_WEBHOOK_SECRET)")
			}
			if target == "" {
				target = cfg.AppURL + "/api/webhooks/psp"
			}
			if u, err := url.Parse(target); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return fmt.Errorf("--url must be an absolute http(s) URL, got %q", target)
			}
			db, tenant, err := c.tenant(cmd, tenantID)
			if err != nil {
				return err
			}
			var member models.AudienceMember
			if err := tenantRow(cmd, db, tenant, "--member", "member", memberID, &member); err != nil {
				return err
			}
			var product models.Product
			if err := tenantRow(cmd, db, tenant, "--product", "product", productID, &product); err != nil {
				return err
			}

			now := time.Now()
			pi := psp.NewID("pi")
			session := psp.CheckoutSession{
				ID:            psp.NewID("cs_test"),
				AmountTotal:   product.Amount,
				Currency:      product.Currency,
				CustomerEmail: member.Email,
				Metadata: map[string]string{
					"tenant_id":          models.FormatID(tenant.ID),
					"audience_member_id": models.FormatID(member.ID),
					"product_id":         models.FormatID(product.ID),
				},
				Mode:          "payment",
				PaymentIntent: &pi,
				PaymentStatus: "paid",
				Status:        "complete",
				SuccessURL:    fmt.Sprintf("%s/checkout/return?tenant=%d&session_id={CHECKOUT_SESSION_ID}", cfg.AppURL, tenant.ID),
				CancelURL:     cfg.AppURL,
				Created:       now.Unix(),
			}
			eventID, body := psp.NewEvent(eventType, tenant.Account(), session, now)
			status, err := post(cmd, target, body, psp.Sign(body, cfg.PSP.WebhookSecrets[0], now))
			if err != nil {
				return fmt.Errorf("post event %s to %s: %w", eventID, target, err)
			}
			return c.print(webhookSentJSON{EventID: eventID, Type: eventType, CheckoutSessionID: session.ID, URL: target, Status: status})
		},
	}
	send.Flags().StringVar(&tenantID, "tenant", "", "tenant id (required)")
	send.Flags().StringVar(&memberID, "member", "", "audience member id of the tenant (required)")
	send.Flags().StringVar(&productID, "product", "", "product id of the tenant (required)")
	send.Flags().StringVar(&target, "url", "", "webhook endpoint (default APP_URL/api/webhooks/psp)")
	send.Flags().StringVar(&eventType, "type", psp.EventCheckoutCompleted, "event type")
	cmd.AddCommand(send)
	return cmd
}

// tenantRow loads into dest the row with the id given in flag, which must belong to tenant.
func tenantRow(cmd *cobra.Command, db *gorm.DB, tenant *models.Tenant, flag, what, id string, dest any) error {
	n, ok := models.ParseID(id)
	if !ok {
		return fmt.Errorf("%s must be a %s id, got %q", flag, what, id)
	}
	err := db.WithContext(cmd.Context()).Where("tenant_id = ?", tenant.ID).Take(dest, n).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return fmt.Errorf("%s %s not found at tenant %d", what, id, tenant.ID)
	}
	if err != nil {
		return fmt.Errorf("load %s %s: %w", what, id, err)
	}
	return nil
}

// post delivers body signed with signature to target and returns the answer's status, or an
// error when the request fails or the status is not 2xx.
func post(cmd *cobra.Command, target string, body []byte, signature string) (int, error) {
	req, err := http.NewRequestWithContext(cmd.Context(), http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("PSP-Signature", signature)
	res, err := (&http.Client{Timeout: webhookTimeout}).Do(req)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // the caller names the URL
		}
		return 0, err
	}
	defer res.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(res.Body, 512))
	if res.StatusCode < 200 || res.StatusCode > 299 {
		return res.StatusCode, fmt.Errorf("endpoint answered %s: %s", res.Status, bytes.TrimSpace(answer))
	}
	return res.StatusCode, nil
}
