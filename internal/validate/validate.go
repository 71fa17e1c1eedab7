// Package validate holds the Laravel-compatible validation rules shared by the HTTP inputs:
// the same messages, attribute names and empty-value semantics as Laravel's validator.
package validate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/eventq/eventq/internal/apperr"
)

// Display is Laravel's displayable attribute name: underscores become spaces.
func Display(field string) string { return strings.ReplaceAll(field, "_", " ") }

// Required records Laravel's "required" message for field.
func Required(errs *apperr.FieldErrors, field string) {
	errs.Add(field, fmt.Sprintf("The %s field is required.", Display(field)))
}

// Add records "The <field> field <rest>" for field.
func Add(errs *apperr.FieldErrors, field, rest string) {
	errs.Add(field, fmt.Sprintf("The %s field %s", Display(field), rest))
}

// Integer applies "integer|min:min" to a present, non-empty value and returns it. Integers
// may come as JSON numbers or decimal strings; "1.5", "1e3" and values beyond int64 are not
// integers.
func Integer(errs *apperr.FieldErrors, field string, v any, min int64) (int64, bool) {
	var text string
	switch t := v.(type) {
	case json.Number:
		text = t.String()
	case string:
		text = t
	default:
		Add(errs, field, "must be an integer.")
		return 0, false
	}
	n, err := strconv.ParseInt(text, 10, 64)
	if err != nil {
		Add(errs, field, "must be an integer.")
		return 0, false
	}
	if n < min {
		Add(errs, field, fmt.Sprintf("must be at least %d.", min))
		return n, false
	}
	return n, true
}

// OptionalInteger applies "nullable|integer|min:min|max:max" to a query parameter: raw "" is
// absent and gives def.
func OptionalInteger(errs *apperr.FieldErrors, field, raw string, min, max, def int64) int64 {
	if raw == "" {
		return def
	}
	n, ok := Integer(errs, field, raw, min)
	if !ok {
		return def
	}
	if n > max {
		Add(errs, field, fmt.Sprintf("must not be greater than %d.", max))
		return def
	}
	return n
}

// RequiredString applies "required|string|max:max" and returns the string.
func RequiredString(errs *apperr.FieldErrors, field string, v any, max int) (string, bool) {
	if v == nil {
		Required(errs, field)
		return "", false
	}
	return str(errs, field, v, max)
}

// NullableString applies "nullable|string|max:max"; nil means absent or null.
func NullableString(errs *apperr.FieldErrors, field string, v any, max int) *string {
	if v == nil {
		return nil
	}
	s, ok := str(errs, field, v, max)
	if !ok {
		return nil
	}
	return &s
}

func str(errs *apperr.FieldErrors, field string, v any, max int) (string, bool) {
	s, ok := v.(string)
	if !ok {
		Add(errs, field, "must be a string.")
		return "", false
	}
	if strings.IndexByte(s, 0) >= 0 { // a NUL, or invalid UTF-8 (see DecodeObject)
		Add(errs, field, "format is invalid.")
		return "", false
	}
	if utf8.RuneCountInString(s) > max {
		Add(errs, field, fmt.Sprintf("must not be greater than %d characters.", max))
		return s, false
	}
	return s, true
}

// EmptyToNil is Laravel's TrimStrings + ConvertEmptyStringsToNull on one scalar input.
func EmptyToNil(s string) any {
	if s = strings.TrimSpace(s); s == "" {
		return nil
	}
	return s
}

// DecodeObject reads a JSON object as Laravel's request would see it: strings trimmed, empty
// strings null. Anything that is not a JSON object is an empty input. Invalid UTF-8 inside a
// string decodes as a NUL character, which every string rule refuses as "format is invalid"
// (encoding/json would otherwise turn it silently into U+FFFD).
func DecodeObject(body []byte) map[string]any {
	if !utf8.Valid(body) {
		if !json.Valid(body) {
			return map[string]any{}
		}
		body = invalidUTF8AsNUL(body)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil || dec.More() {
		return map[string]any{}
	}
	obj, ok := normalize(v).(map[string]any)
	if !ok {
		return map[string]any{}
	}
	return obj
}

// invalidUTF8AsNUL replaces each invalid byte of a syntactically valid JSON text with the
// escape \u0000. Outside strings JSON allows only ASCII, and inside one an escape is followed
// by ASCII, so every invalid byte stands alone in a string and the result stays valid JSON.
func invalidUTF8AsNUL(body []byte) []byte {
	out := make([]byte, 0, len(body)+64)
	for len(body) > 0 {
		r, size := utf8.DecodeRune(body)
		if r == utf8.RuneError && size <= 1 {
			out = append(out, `\u0000`...)
		} else {
			out = append(out, body[:size]...)
		}
		body = body[size:]
	}
	return out
}

// Storable makes a server-set value storable in every supported database: invalid UTF-8 and
// NUL characters become U+FFFD, and the result is cut to at most max characters (not bytes),
// never inside a character.
func Storable(s string, max int) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if strings.IndexByte(s, 0) >= 0 {
		s = strings.ReplaceAll(s, "\x00", "\uFFFD")
	}
	if len(s) <= max { // bytes >= characters
		return s
	}
	n := 0
	for i := range s {
		if n == max {
			return s[:i]
		}
		n++
	}
	return s
}

func normalize(v any) any {
	switch t := v.(type) {
	case string:
		if s := strings.TrimSpace(t); s != "" {
			return s
		}
		return nil
	case []any:
		for i := range t {
			t[i] = normalize(t[i])
		}
	case map[string]any:
		for k := range t {
			t[k] = normalize(t[k])
		}
	}
	return v
}

// HTTPURL reports whether s is an absolute http or https URL with a host and no whitespace:
// Laravel's "url" rule as eventq applies it to event URLs, return URLs, APP_URL and the CLI's
// --url.
func HTTPURL(s string) bool {
	_, ok := ParseHTTPURL(s)
	return ok
}

// ParseHTTPURL is HTTPURL that also returns the parsed URL when it parses at all.
func ParseHTTPURL(s string) (*url.URL, bool) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, false
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
		return u, false
	}
	return u, !strings.ContainsAny(s, " \t\r\n")
}
