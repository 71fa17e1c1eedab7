package routes

import (
	"errors"
	"fmt"
	"html/template"
	"net/url"
	"strings"

	"github.com/gofiber/fiber/v2"
	"gorm.io/gorm"

	"github.com/eventq/eventq/internal/apperr"
	"github.com/eventq/eventq/internal/payments"
	"github.com/eventq/eventq/internal/psp"
	"github.com/eventq/eventq/internal/validate"
	"github.com/eventq/eventq/models"
)

var errNotFound = &apperr.Error{Code: apperr.NotFound, Message: "Not Found."}

// createCheckout answers POST /api/platform/checkout/sessions: a payment Checkout Session on
// the tenant's connected account for one product and member, with the metadata fulfilment
// resolves and a success URL that leads to the return page.
func (s *Server) createCheckout(c *fiber.Ctx) error {
	in := validate.DecodeObject(c.Body())
	var errs apperr.FieldErrors
	memberID := idField(&errs, "audience_member_id", in)
	productID := idField(&errs, "product_id", in)
	cancelURL, ok := validate.RequiredString(&errs, "cancel_url", in["cancel_url"], 2048)
	if ok {
		if u, err := url.Parse(cancelURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			validate.Add(&errs, "cancel_url", "must be a valid URL.")
		}
	}
	if err := errs.Err(); err != nil {
		return err
	}
	ctx := c.UserContext()
	tenantID := principal(c).TenantID
	var (
		tenant  models.Tenant
		member  models.AudienceMember
		product models.Product
	)
	if err := s.DB.WithContext(ctx).Take(&tenant, tenantID).Error; err != nil {
		return err
	}
	if err := existsIn(s.DB.WithContext(ctx), &member, memberID, tenantID); err != nil {
		errs.Add("audience_member_id", "The selected audience member id is invalid.")
	}
	if err := existsIn(s.DB.WithContext(ctx), &product, productID, tenantID); err != nil {
		errs.Add("product_id", "The selected product id is invalid.")
	}
	if err := errs.Err(); err != nil {
		return err
	}
	account := tenant.Account()
	cs, err := s.PSP.CreateCheckoutSession(ctx, psp.CheckoutParams{
		Account: account, ProductName: product.Name, Amount: product.Amount, Currency: product.Currency,
		CustomerEmail: member.Email, CancelURL: cancelURL,
		SuccessURL: fmt.Sprintf("%s/checkout/return?tenant=%d&session_id={CHECKOUT_SESSION_ID}", s.AppURL, tenant.ID),
		Metadata: map[string]string{
			"tenant_id": models.FormatID(tenant.ID), "audience_member_id": models.FormatID(member.ID),
			"product_id": models.FormatID(product.ID),
		},
	})
	if err != nil {
		return err
	}
	return c.Status(fiber.StatusCreated).JSON(fiber.Map{"data": fiber.Map{"id": cs.ID, "url": cs.URL}})
}

// checkoutReturn answers GET /checkout/return?tenant=…&session_id=…, where the provider sends
// the member after paying: it retrieves the session as the tenant's account and fulfils it
// through the same path as the webhook worker.
func (s *Server) checkoutReturn(c *fiber.Ctx) error {
	ctx := c.UserContext()
	tenantID, ok := models.ParseID(query(c, "tenant"))
	sessionID := strings.TrimSpace(query(c, "session_id"))
	if !ok || sessionID == "" || len(sessionID) > 255 {
		return errNotFound
	}
	var tenant models.Tenant
	if err := s.DB.WithContext(ctx).Take(&tenant, tenantID).Error; err != nil {
		if errors.Is(err, gorm.ErrRecordNotFound) {
			return errNotFound
		}
		return err
	}
	account := tenant.Account()
	cs, err := s.PSP.GetCheckoutSession(ctx, account, sessionID)
	if err != nil {
		return err
	}
	if cs.Metadata["tenant_id"] != models.FormatID(tenant.ID) {
		return errNotFound
	}
	res, err := s.Payments.Fulfil(ctx, payments.SessionOf(cs, account))
	if errors.Is(err, payments.ErrRejected) {
		s.Log.Warn("return page: checkout not fulfilled", "session_id", cs.ID, "reason", err.Error())
		return errNotFound
	}
	if err != nil {
		return err
	}
	if c.Accepts(fiber.MIMETextHTML, fiber.MIMEApplicationJSON) == fiber.MIMEApplicationJSON {
		out := returnStatus{Status: res.Status}
		if res.PurchaseID != 0 {
			id := models.FormatID(res.PurchaseID)
			out.PurchaseID = &id
		}
		return c.JSON(fiber.Map{"data": out})
	}
	c.Set(fiber.HeaderContentType, fiber.MIMETextHTMLCharsetUTF8)
	return returnPage.Execute(c.Response().BodyWriter(), res.Status)
}

// returnStatus is the return page's JSON answer; a struct, not a map, so the keys keep the
// contract's order (status, then purchase_id).
type returnStatus struct {
	Status     string  `json:"status"`
	PurchaseID *string `json:"purchase_id"`
}

var returnPage = template.Must(template.New("return").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">
<title>{{if eq . "pending"}}Payment processing{{else}}Thank you{{end}}</title></head>
<body style="font-family:system-ui,sans-serif;max-width:32rem;margin:4rem auto;padding:0 1rem">
{{if eq . "pending"}}<h1>Your payment is processing</h1>
<p>We will unlock your purchase as soon as the payment is confirmed. You can close this page.</p>
{{else}}<h1>Thank you!</h1><p>Your purchase is complete and ready to use.</p>{{end}}
<p data-status="{{.}}"></p>
</body></html>
`))

// idField applies "required" to an id given as a JSON string or number; an unparsable id
// is 0, which the exists check then rejects.
func idField(errs *apperr.FieldErrors, field string, in map[string]any) uint64 {
	v := in[field]
	if v == nil {
		validate.Required(errs, field)
		return 0
	}
	id, _ := models.ParseID(strings.TrimSpace(fmt.Sprint(v))) // 0 fails the exists check
	return id
}

func existsIn(db *gorm.DB, dst any, id, tenantID uint64) error {
	if id == 0 {
		return gorm.ErrRecordNotFound
	}
	return db.Where("id = ? AND tenant_id = ?", id, tenantID).Take(dst).Error
}
