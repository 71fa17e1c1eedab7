// Package validate holds the Laravel-compatible validation rules shared by the HTTP inputs:
// the same messages, attribute names and empty-value semantics as Laravel's validator.
package validate

import (
	"bytes"
	"encoding/json"
	"fmt"
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
// strings null. Anything that is not a JSON object is an empty input.
func DecodeObject(body []byte) map[string]any {
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
