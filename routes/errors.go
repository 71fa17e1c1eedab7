package routes

import (
	"errors"

	"github.com/gofiber/fiber/v2"

	"github.com/eventq/eventq/internal/apperr"
	"github.com/eventq/eventq/internal/database"
	"github.com/eventq/eventq/internal/httpx"
)

// retryAfterOutage is the Retry-After of a 503 for an unreachable database, in seconds: about
// what a Postgres restart takes.
const retryAfterOutage = "2"

// statusOf is the one table from error code to HTTP status.
var statusOf = map[apperr.Code]int{
	apperr.Invalid:          fiber.StatusUnprocessableEntity,
	apperr.Unauthorized:     fiber.StatusUnauthorized,
	apperr.Forbidden:        fiber.StatusForbidden,
	apperr.NotFound:         fiber.StatusNotFound,
	apperr.TooLarge:         fiber.StatusRequestEntityTooLarge,
	apperr.UnsupportedMedia: fiber.StatusUnsupportedMediaType,
	apperr.BadRequest:       fiber.StatusBadRequest,
	apperr.TooMany:          fiber.StatusTooManyRequests,
	apperr.BadGateway:       fiber.StatusBadGateway,
	apperr.Unavailable:      fiber.StatusServiceUnavailable,
	apperr.Internal:         fiber.StatusInternalServerError,
}

// messageOf is Laravel's body message for statuses raised by the framework itself.
var messageOf = map[int]string{
	fiber.StatusBadRequest:                  "Bad Request.",
	fiber.StatusUnauthorized:                "Unauthenticated.",
	fiber.StatusForbidden:                   "Forbidden.",
	fiber.StatusNotFound:                    "Not Found.",
	fiber.StatusMethodNotAllowed:            "Method Not Allowed.",
	fiber.StatusRequestTimeout:              "Request Timeout.",
	fiber.StatusRequestEntityTooLarge:       "Content Too Large.",
	fiber.StatusUnsupportedMediaType:        "Unsupported Media Type.",
	fiber.StatusTooManyRequests:             "Too Many Attempts.",
	fiber.StatusRequestHeaderFieldsTooLarge: "Request Header Fields Too Large.",
}

// errorBody is Laravel's JSON error shape; Errors is present for validation failures only.
type errorBody struct {
	Message string           `json:"message"`
	Errors  orderedFieldErrs `json:"errors,omitzero"`
}

// handleError renders every error as Laravel would. Internal errors are logged with detail;
// the client sees only "Server Error.".
func (s *Server) handleError(c *fiber.Ctx, err error) error {
	var (
		status int
		body   errorBody
		ae     *apperr.Error
		fe     *fiber.Error
	)
	switch {
	case errors.As(err, &ae):
		status = statusOf[ae.Code]
		body.Message = ae.Message
		if ae.Fields != nil {
			body.Errors = orderedFieldErrs{ae.Fields}
		}
		switch {
		case ae.Code == apperr.Unavailable: // a missing setting, not a fault: the operator's to fix
			s.log(c).Warn("request refused: not configured", "method", c.Method(), "route", c.Route().Path, "err", err)
		case status >= 500:
			s.log(c).Error("request failed", "method", c.Method(), "route", c.Route().Path, "err", err)
		}
	case errors.As(err, &fe) && fe.Code < 500:
		status = fe.Code
		if status == fiber.StatusRequestEntityTooLarge { // refused before its body was read
			httpx.LingerOnClose(c)
		}
		body.Message = messageOf[fe.Code]
		if body.Message == "" {
			body.Message = "Bad Request."
			status = fiber.StatusBadRequest
		}
	case database.Unavailable(err):
		// The database (or Redis) could not be reached: the client may retry shortly.
		status = fiber.StatusServiceUnavailable
		c.Set(fiber.HeaderRetryAfter, retryAfterOutage)
		s.log(c).Warn("request refused: a dependency is unreachable", "method", c.Method(), "route", c.Route().Path, "err", err)
		body.Message = "Service Unavailable."
	case errors.As(err, &fe) && fe.Code == fiber.StatusBadGateway:
		// Fiber's name for a request that could not be read, the connection having failed
		// (the client went away, or a shutdown closed a connection that never carried a
		// request): the client's side or nobody's, not the server's fault. The answer is as
		// before; the log is at debug level, not an error for every such connection.
		status = fiber.StatusInternalServerError
		s.log(c).Debug("request not read: connection failed", "err", err)
		body.Message = "Server Error."
	default:
		status = fiber.StatusInternalServerError
		s.log(c).Error("request failed", "method", c.Method(), "route", c.Route().Path, "err", err)
		body.Message = "Server Error."
	}
	// 502 names the provider and 503 says the service lacks configuration; neither carries
	// anything internal. Every other 5xx is "Server Error.".
	if status >= 500 && status != fiber.StatusBadGateway && status != fiber.StatusServiceUnavailable {
		body = errorBody{Message: "Server Error."}
	}
	return c.Status(status).JSON(body)
}

// orderedFieldErrs marshals validation errors in the order they were found, as Laravel does.
type orderedFieldErrs struct{ f *apperr.FieldErrors }

func (o orderedFieldErrs) MarshalJSON() ([]byte, error) {
	buf := []byte{'{'}
	for i, k := range o.f.Keys() {
		if i > 0 {
			buf = append(buf, ',')
		}
		key, _ := httpx.JSONMarshal(k)
		msgs, _ := httpx.JSONMarshal(o.f.Messages(k))
		buf = append(append(append(buf, key...), ':'), msgs...)
	}
	return append(buf, '}'), nil
}

// IsZero lets omitempty drop an absent errors object.
func (o orderedFieldErrs) IsZero() bool { return o.f.Empty() }
