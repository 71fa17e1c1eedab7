package routes

import (
	"fmt"
	"html/template"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/eventq/eventq/internal/apperr"
	"github.com/eventq/eventq/internal/validate"
	"github.com/eventq/eventq/models"
)

// createCheckout answers POST /api/platform/checkout/sessions: it checks the body's shape and
// creates the session with payments.Service.CreateCheckout for the token's tenant.
func (s *Server) createCheckout(c *fiber.Ctx) error {
	in := validate.DecodeObject(c.Body())
	var errs apperr.FieldErrors
	memberID := idField(&errs, "audience_member_id", in)
	productID := idField(&errs, "product_id", in)
	cancelURL, ok := validate.RequiredString(&errs, "cancel_url", in["cancel_url"], 2048)
	if ok && !validate.HTTPURL(cancelURL) {
		validate.Add(&errs, "cancel_url", "must be a valid URL.")
	}
	if err := errs.Err(); err != nil {
		return err
	}
	cs, err := s.Payments.CreateCheckout(c.UserContext(), principal(c).TenantID, memberID, productID, cancelURL)
	if err != nil {
		return err
	}
	return c.Status(fiber.StatusCreated).JSON(fiber.Map{"data": fiber.Map{"id": cs.ID, "url": cs.URL}})
}

// checkoutReturn answers GET /checkout/return?tenant=…&session_id=…, where the provider sends
// the member after paying: payments.Service.Return fulfils the session, and the answer is JSON
// or a small HTML page.
//
// It spends the client address's RATE_LIMIT_RETURN budget first: the page is public.
func (s *Server) checkoutReturn(c *fiber.Ctx) error {
	if err := s.limit(c, budget{name: limitReturn, key: s.clientBudgetKey(c), rate: s.Guard.Limits.Return}); err != nil {
		return err
	}
	tenantID, ok := models.ParseID(query(c, "tenant"))
	if !ok {
		return apperr.ErrNotFound
	}
	res, err := s.Payments.Return(c.UserContext(), tenantID, strings.TrimSpace(query(c, "session_id")))
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
// is 0, which CreateCheckout then rejects as not the tenant's.
func idField(errs *apperr.FieldErrors, field string, in map[string]any) uint64 {
	v := in[field]
	if v == nil {
		validate.Required(errs, field)
		return 0
	}
	id, _ := models.ParseID(strings.TrimSpace(fmt.Sprint(v))) // 0 fails the exists check
	return id
}
