package routes

import (
	"github.com/gofiber/fiber/v2"

	"github.com/eventq/eventq/internal/apperr"
	"github.com/eventq/eventq/internal/validate"
)

// query is the value of the query parameter name. When the parameter is repeated, the last
// value wins, as in PHP and so Laravel (fasthttp's Peek would return the first). The string
// is a copy: it may outlive the request.
func query(c *fiber.Ctx, name string) string {
	values := c.Context().QueryArgs().PeekMulti(name)
	if len(values) == 0 {
		return ""
	}
	return string(values[len(values)-1])
}

// requiredCount reads the required count query parameter of a trim (an integer of at least
// 1), adding Laravel's message to errs when it is missing or invalid.
func requiredCount(c *fiber.Ctx, errs *apperr.FieldErrors) int64 {
	raw := validate.EmptyToNil(query(c, "count"))
	if raw == nil {
		validate.Required(errs, "count")
		return 0
	}
	count, _ := validate.Integer(errs, "count", raw, 1)
	return count
}
