// Package apperr defines the small set of error kinds that the HTTP layer maps to statuses.
// Code below the HTTP layer returns these; routes/errors.go renders them.
package apperr

import (
	"fmt"
)

// Code classifies an error for the edge of the service.
type Code string

// The error codes. Anything not carrying one of these is internal.
const (
	Invalid          Code = "invalid"           // 422, with field errors
	BadRequest       Code = "bad_request"       // 400: a body that cannot be read as sent
	Unauthorized     Code = "unauthorized"      // 401
	Forbidden        Code = "forbidden"         // 403
	NotFound         Code = "not_found"         // 404
	TooLarge         Code = "too_large"         // 413
	UnsupportedMedia Code = "unsupported_media" // 415: an unknown Content-Encoding
	TooMany          Code = "too_many"          // 429: a rate limit
	BadGateway       Code = "bad_gateway"       // 502: the payment provider failed
	Unavailable      Code = "unavailable"       // 503: a dependency is not configured
	Internal         Code = "internal"          // 500
)

// ErrNotFound is the one answer for a resource that does not exist, belongs to another tenant
// or cannot be named so (an id in another form): the same 404 for all, so that an answer
// never tells which.
var ErrNotFound = &Error{Code: NotFound, Message: "Not Found."}

// Error is an error with a code and a client-safe message.
type Error struct {
	Code    Code
	Message string
	// Fields holds validation errors in the order they were found; only for Invalid.
	Fields *FieldErrors
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

// Errorf returns an *Error with the given code and formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// FieldErrors collects validation messages per field path, keeping the order fields were
// first reported in (Laravel's order), which decides the summary message.
type FieldErrors struct {
	keys []string
	msgs map[string][]string
}

// Add records msg against field.
func (f *FieldErrors) Add(field, msg string) {
	if f.msgs == nil {
		f.msgs = map[string][]string{}
	}
	if _, ok := f.msgs[field]; !ok {
		f.keys = append(f.keys, field)
	}
	f.msgs[field] = append(f.msgs[field], msg)
}

// Empty reports whether no error was added.
func (f *FieldErrors) Empty() bool { return f == nil || len(f.keys) == 0 }

// Keys returns the fields in report order.
func (f *FieldErrors) Keys() []string { return f.keys }

// Messages returns the messages for field.
func (f *FieldErrors) Messages(field string) []string { return f.msgs[field] }

// Summary is Laravel's top-level message: the first error, plus " (and N more error[s])".
func (f *FieldErrors) Summary() string {
	if f.Empty() {
		return ""
	}
	total := 0
	for _, k := range f.keys {
		total += len(f.msgs[k])
	}
	first := f.msgs[f.keys[0]][0]
	switch more := total - 1; more {
	case 0:
		return first
	case 1:
		return first + " (and 1 more error)"
	default:
		return fmt.Sprintf("%s (and %d more errors)", first, more)
	}
}

// Err returns nil when f is empty, else an Invalid *Error carrying f.
func (f *FieldErrors) Err() error {
	if f.Empty() {
		return nil
	}
	return &Error{Code: Invalid, Message: f.Summary(), Fields: f}
}
