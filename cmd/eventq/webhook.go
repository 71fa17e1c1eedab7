package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/hibiken/asynq"
	"github.com/spf13/cobra"
	"gorm.io/gorm"

	"github.com/eventq/eventq/internal/config"
	"github.com/eventq/eventq/internal/payments"
	"github.com/eventq/eventq/internal/psp"
	"github.com/eventq/eventq/internal/validate"
	"github.com/eventq/eventq/jobs"
	"github.com/eventq/eventq/models"
)

// webhookTimeout bounds the whole delivery of `webhook send`.
const webhookTimeout = 10 * time.Second

// webhookSentJSON is what `webhook send` prints once the service has accepted the event.
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
		Short: "Sign a realistic checkout event with PSP_WEBHOOK_SECRET, post it, and check the service queued it",
		Long: "Builds a paid Checkout Session for the member and product, wraps it in an event as the\n" +
			"provider delivers it for the tenant's connected account, signs it with the first secret of\n" +
			"PSP_WEBHOOK_SECRET and posts it to --url (default APP_URL/api/webhooks/psp). The webhook\n" +
			"answers 200 to everything, so the command then looks for the event where the api puts what\n" +
			"it accepted (its task in Redis, or the database inbox) and fails, naming the likely cause,\n" +
			"unless it is there.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if strings.TrimSpace(eventType) == "" {
				return errors.New("--type must not be empty")
			}
			if eventType != psp.EventCheckoutCompleted && eventType != psp.EventAsyncPaymentSucceeded {
				return fmt.Errorf("--type %s: the service does not fulfil this type, so it would ignore the event; use %s or %s",
					eventType, psp.EventCheckoutCompleted, psp.EventAsyncPaymentSucceeded)
			}
			cfg, err := c.config()
			if err != nil {
				return err
			}
			if len(cfg.PSP.WebhookSecrets) == 0 {
				return errors.New("no webhook signing secret: set PSP_WEBHOOK_SECRET (or STRIPE_WEBHOOK_SECRET)")
			}
			if target == "" {
				target = c.apiURL(cfg) + "/api/webhooks/psp"
			}
			if !validate.HTTPURL(target) {
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
			session := psp.SessionObject{
				ID:            psp.NewID("cs_test"),
				AmountTotal:   product.Amount,
				Currency:      product.Currency,
				CustomerEmail: member.Email,
				Metadata:      payments.Metadata(tenant.ID, member.ID, product.ID),
				Mode:          "payment",
				PaymentIntent: &pi,
				PaymentStatus: "paid",
				Status:        "complete",
				SuccessURL:    payments.SuccessURL(cfg.AppURL, tenant.ID),
				CancelURL:     cfg.AppURL,
				Created:       now.Unix(),
			}
			eventID, body := psp.NewEvent(eventType, tenant.Account(), session, now)
			status, err := post(cmd, target, body, psp.Sign(body, cfg.PSP.WebhookSecrets[0], now))
			if errors.Is(err, syscall.ECONNREFUSED) {
				return fmt.Errorf("post event %s to %s: %w: the api is not running there (start it, e.g. make run, or pass --url)", eventID, target, err)
			}
			if err != nil {
				return fmt.Errorf("post event %s to %s: %w", eventID, target, err)
			}
			if err := c.accepted(cmd, cfg, eventID); err != nil {
				return fmt.Errorf("%s answered %d but did not accept event %s: %w", target, status, eventID, err)
			}
			return c.print(webhookSentJSON{EventID: eventID, Type: eventType, CheckoutSessionID: session.ID, URL: target, Status: status})
		},
	}
	send.Flags().StringVar(&tenantID, "tenant", "", "tenant id (required)")
	send.Flags().StringVar(&memberID, "member", "", "audience member id of the tenant (required)")
	send.Flags().StringVar(&productID, "product", "", "product id of the tenant (required)")
	send.Flags().StringVar(&target, "url", "", "webhook endpoint (default APP_URL/api/webhooks/psp)")
	send.Flags().StringVar(&eventType, "type", psp.EventCheckoutCompleted, "event type: "+psp.EventCheckoutCompleted+" or "+psp.EventAsyncPaymentSucceeded)
	cmd.AddCommand(send)
	return cmd
}

// acceptWait is how long `webhook send` looks for the event after the answer. The api queues
// (or saves) an accepted event before it answers, so this is only slack.
const acceptWait = 2 * time.Second

// accepted reports whether the service accepted event id: its task is in Redis (in any state,
// as the worker may have run it already) or it waits in the database inbox. Otherwise the
// error names the likely cause.
func (c *cli) accepted(cmd *cobra.Command, cfg config.Config, id string) error {
	a, err := c.application()
	if err != nil {
		return err
	}
	inspector := a.TaskInspector()
	deadline := time.Now().Add(acceptWait)
	for {
		_, err := inspector.GetTaskInfo(jobs.TaskQueue, id)
		switch {
		case err == nil:
			return nil
		case !errors.Is(err, asynq.ErrTaskNotFound) && !errors.Is(err, asynq.ErrQueueNotFound):
			return fmt.Errorf("cannot check its task in Redis (%s): %w", config.RedisVar(config.DefaultConnection), err)
		}
		var n int64
		if err := a.DB.WithContext(cmd.Context()).Model(&models.WebhookInbox{}).Where("event_id = ?", id).Count(&n).Error; err != nil {
			return fmt.Errorf("cannot check the webhook inbox: %w", err)
		}
		if n > 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("the event is neither queued nor in the inbox. The likely cause: the api's " +
				"PSP_WEBHOOK_SECRET differs from the one used here, so it refused the signature (its log says " +
				"\"webhook refused\"); restart the api with the same PSP_WEBHOOK_SECRET. Otherwise the api uses " +
				"another REDIS_URL or DATABASE_URL than this command, or --url is not an eventq api")
		}
		time.Sleep(100 * time.Millisecond)
	}
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
