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
	"github.com/stripe/stripe-go/v76"

	"github.com/eventq/eventq/app"
	"github.com/eventq/eventq/internal/apperr"
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
	var f sendFlags
	send := &cobra.Command{
		Use:   "send",
		Short: "Sign a realistic provider event with PSP_WEBHOOK_SECRET, post it, and check the service queued it",
		Long: "Builds an event of --type as the provider delivers it for the tenant's connected account:\n" +
			"for a checkout type, a paid Checkout Session for --member and --product (a new purchase);\n" +
			"for a refund or a dispute, a full refund or a dispute of the payment of --purchase. It signs\n" +
			"the event with the first secret of PSP_WEBHOOK_SECRET and posts it to --url (default\n" +
			"APP_URL/api/webhooks/psp). The webhook answers 200 to everything, so the command then looks\n" +
			"for the event where the api puts what it accepted (its task in Redis, or the database inbox)\n" +
			"and fails, naming the likely cause, unless it is there.\n\n" +
			"Types: " + strings.Join(payments.HandledTypes(), ", "),
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return c.sendWebhook(cmd, f) },
	}
	send.Flags().StringVar(&f.tenant, "tenant", "", "tenant id (required)")
	send.Flags().StringVar(&f.member, "member", "", "audience member id of the tenant (checkout types)")
	send.Flags().StringVar(&f.product, "product", "", "product id of the tenant (checkout types)")
	send.Flags().StringVar(&f.purchase, "purchase", "", "purchase id of the tenant, as purchases list prints it (refund and dispute types)")
	send.Flags().StringVar(&f.target, "url", "", "webhook endpoint (default APP_URL/api/webhooks/psp)")
	send.Flags().StringVar(&f.eventType, "type", string(stripe.EventTypeCheckoutSessionCompleted),
		"event type: "+strings.Join(payments.HandledTypes(), ", "))
	cmd.AddCommand(send)
	return cmd
}

// sendFlags are the flags of `webhook send`.
type sendFlags struct {
	tenant, member, product, purchase, target, eventType string
}

// sendWebhook is `webhook send`: it checks the flags against what events of the type are
// about, builds and signs the event, posts it and checks that the service accepted it.
func (c *cli) sendWebhook(cmd *cobra.Command, f sendFlags) error {
	if strings.TrimSpace(f.eventType) == "" {
		return errors.New("--type must not be empty")
	}
	object, ok := payments.EventObject(f.eventType)
	if !ok {
		return fmt.Errorf("--type %s: the service does not handle this type, so it would ignore the event; use one of %s",
			f.eventType, strings.Join(payments.HandledTypes(), ", "))
	}
	checkout := object == payments.ObjectCheckoutSession
	switch {
	case checkout && f.purchase != "":
		return fmt.Errorf("--purchase is for refund and dispute events; a %s event makes a new purchase for --member and --product", f.eventType)
	case !checkout && (f.member != "" || f.product != ""):
		return fmt.Errorf("--member and --product are for checkout events; a %s event is about the purchase given with --purchase", f.eventType)
	}
	cfg, err := c.config()
	if err != nil {
		return err
	}
	if len(cfg.PSP.WebhookSecrets) == 0 {
		return errors.New("no webhook signing secret: set PSP_WEBHOOK_SECRET (or STRIPE_WEBHOOK_SECRET); under make run, load var/run.env first (. var/run.env), which holds its local secret")
	}
	target := f.target
	if target == "" {
		target = c.apiURL(cfg) + "/api/webhooks/psp"
	}
	if !validate.HTTPURL(target) {
		return fmt.Errorf("--url must be an absolute http(s) URL, got %q", target)
	}
	tenant, a, err := c.tenantApp(cmd, f.tenant)
	if err != nil {
		return err
	}
	now := c.clock.Now()
	var (
		sessionID string
		data      any
	)
	if checkout {
		sessionID, data, err = checkoutObject(cmd, a, tenant, cfg.AppURL, f, now)
	} else {
		sessionID, data, err = paymentObject(cmd, a, tenant, object, f.purchase, now)
	}
	if err != nil {
		return err
	}
	eventID, body := psp.NewObjectEvent(stripe.EventType(f.eventType), tenant.Account(), data, now)
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
	return c.print(webhookSentJSON{EventID: eventID, Type: f.eventType, CheckoutSessionID: sessionID, URL: target, Status: status})
}

// checkoutObject is a new paid Checkout Session of tenant for the member and product of f, as
// the provider writes it, and its id.
func checkoutObject(cmd *cobra.Command, a *app.App, tenant *models.Tenant, appURL string, f sendFlags, now time.Time) (string, any, error) {
	if _, ok := models.ParseID(f.member); !ok {
		return "", nil, fmt.Errorf("--member must be a member id, got %q", f.member)
	}
	member, err := a.Members.Get(cmd.Context(), tenant.ID, f.member)
	if err != nil {
		return "", nil, rowErr(err, "member", f.member, tenant.ID)
	}
	product, err := a.Products.Get(cmd.Context(), tenant.ID, f.product)
	if err != nil {
		if _, ok := models.ParseID(f.product); !ok {
			return "", nil, fmt.Errorf("--product must be a product id, got %q", f.product)
		}
		return "", nil, rowErr(err, "product", f.product, tenant.ID)
	}
	pi := psp.NewID("pi")
	session := psp.SessionObject{
		ID:            psp.NewID("cs_test"),
		Object:        payments.ObjectCheckoutSession,
		AmountTotal:   product.Amount,
		Currency:      product.Currency,
		CustomerEmail: member.Email,
		Metadata:      payments.Metadata(tenant.ID, member.ID, product.ID),
		Mode:          "payment",
		PaymentIntent: &pi,
		PaymentStatus: "paid",
		Status:        "complete",
		SuccessURL:    payments.SuccessURL(appURL, tenant.ID),
		CancelURL:     appURL,
		Created:       now.Unix(),
	}
	return session.ID, session, nil
}

// paymentObject is the object of a refund (a fully refunded charge) or a dispute of the
// payment of tenant's purchase purchaseID, as the provider writes it, and the purchase's
// checkout session id.
func paymentObject(cmd *cobra.Command, a *app.App, tenant *models.Tenant, object, purchaseID string, now time.Time) (string, any, error) {
	n, ok := models.ParseID(purchaseID)
	if !ok {
		return "", nil, fmt.Errorf("--purchase must be a purchase id, got %q", purchaseID)
	}
	p, err := a.Purchases.Get(cmd.Context(), tenant.ID, n)
	if err != nil {
		return "", nil, rowErr(err, "purchase", purchaseID, tenant.ID)
	}
	if p.PSPPaymentIntentID == "" {
		return "", nil, fmt.Errorf("purchase %s has no payment intent, so no refund or dispute can name it", purchaseID)
	}
	switch object {
	case payments.ObjectCharge:
		return p.PSPCheckoutSessionID, psp.ChargeObject{
			ID: psp.NewID("ch"), Object: object, Amount: p.AmountTotal, AmountRefunded: p.AmountTotal, Currency: p.Currency,
			PaymentIntent: p.PSPPaymentIntentID, Refunded: true, Created: now.Unix(),
		}, nil
	case payments.ObjectDispute:
		return p.PSPCheckoutSessionID, psp.DisputeObject{
			ID: psp.NewID("dp"), Object: object, Amount: p.AmountTotal, Charge: psp.NewID("ch"), Currency: p.Currency,
			PaymentIntent: p.PSPPaymentIntentID, Reason: "fraudulent", Status: "needs_response", Created: now.Unix(),
		}, nil
	}
	return "", nil, fmt.Errorf("webhook send cannot build an event carrying a %s yet", object)
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
		inbox, err := a.Payments.InInbox(cmd.Context(), id)
		if err != nil {
			return fmt.Errorf("cannot check the webhook inbox: %w", err)
		}
		if inbox {
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

// rowErr says that what a flag named is not the tenant's, or why it could not be looked up.
func rowErr(err error, what, id string, tenantID uint64) error {
	var ae *apperr.Error
	if errors.As(err, &ae) && ae.Code == apperr.NotFound {
		return fmt.Errorf("%s %s not found at tenant %d", what, id, tenantID)
	}
	return fmt.Errorf("load %s %s: %w", what, id, err)
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
