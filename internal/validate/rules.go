package validate

import (
	"encoding/json"
	"fmt"
	"net/mail"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/eventq/eventq/internal/apperr"
)

// Clean applies to a map built in code (the CLI's flags) what DecodeObject applies to a
// request body: strings trimmed, empty strings null, so both go through the same rules.
func Clean(in map[string]any) map[string]any {
	for k, v := range in {
		in[k] = normalize(v)
	}
	return in
}

// Present reports whether key was sent at all, null included.
func Present(in map[string]any, key string) bool {
	_, ok := in[key]
	return ok
}

// Email applies "string|email|max:max" to a present, non-null value: Laravel runs every rule
// of a field, so a long invalid address gets both messages.
func Email(errs *apperr.FieldErrors, field string, v any, max int) (string, bool) {
	s, isString := v.(string)
	if !isString {
		Add(errs, field, "must be a string.")
		Add(errs, field, "must be a valid email address.")
		return "", false
	}
	ok := true
	if addr, err := mail.ParseAddress(s); err != nil || addr.Address != s || strings.IndexByte(s, 0) >= 0 {
		Add(errs, field, "must be a valid email address.")
		ok = false
	}
	if utf8.RuneCountInString(s) > max {
		Add(errs, field, fmt.Sprintf("must not be greater than %d characters.", max))
		ok = false
	}
	return s, ok
}

// Boolean applies Laravel's "boolean": true, false, 1, 0, "1" and "0" (and, as JSON sends
// them, the strings "true" and "false").
func Boolean(errs *apperr.FieldErrors, field string, v any) (bool, bool) {
	switch t := v.(type) {
	case bool:
		return t, true
	case json.Number:
		switch t.String() {
		case "1":
			return true, true
		case "0":
			return false, true
		}
	case string:
		switch t {
		case "1", "true":
			return true, true
		case "0", "false":
			return false, true
		}
	}
	Add(errs, field, "must be true or false.")
	return false, false
}

// IntegerBetween applies "integer|min:min|max:max" to a present, non-null value.
func IntegerBetween(errs *apperr.FieldErrors, field string, v any, min, max int64) (int64, bool) {
	n, ok := Integer(errs, field, v, min)
	if ok && n > max {
		Add(errs, field, fmt.Sprintf("must not be greater than %d.", max))
		return n, false
	}
	return n, ok
}

// StringBetween applies "string|min:min|max:max" to a present, non-null value.
func StringBetween(errs *apperr.FieldErrors, field string, v any, min, max int) (string, bool) {
	s, ok := str(errs, field, v, max)
	if ok && utf8.RuneCountInString(s) < min {
		Add(errs, field, fmt.Sprintf("must be at least %d characters.", min))
		return s, false
	}
	return s, ok
}

var lowerCurrency = regexp.MustCompile(`^[a-z]{3}$`)

// Currency applies "string|size:3|regex:/^[a-z]{3}$/": a three-letter lowercase ISO code.
func Currency(errs *apperr.FieldErrors, field string, v any) (string, bool) {
	s, ok := v.(string)
	if !ok {
		Add(errs, field, "must be a string.")
		Add(errs, field, "format is invalid.")
		return "", false
	}
	ok = true
	if utf8.RuneCountInString(s) != 3 {
		Add(errs, field, "must be 3 characters.")
		ok = false
	}
	if !lowerCurrency.MatchString(s) {
		Add(errs, field, "format is invalid.")
		ok = false
	}
	return s, ok
}

// Prohibited applies Laravel's "prohibited": a field that must not be sent with a value.
func Prohibited(errs *apperr.FieldErrors, field string, v any) {
	if v != nil {
		Add(errs, field, "is prohibited.")
	}
}

// StringList applies "array|max:maxItems" and "field.*: string|max:maxLen" (plus check, when
// given, which returns the message rest of an invalid item or "") and returns the strings.
func StringList(errs *apperr.FieldErrors, field string, v any, maxItems, maxLen int, check func(string) string) ([]string, bool) {
	list, isList := v.([]any)
	if !isList {
		Add(errs, field, "must be an array.")
		return nil, false
	}
	if len(list) > maxItems {
		// One message, not one per item past the limit: the answer's size and the time to
		// produce it stay the same however long the list.
		Add(errs, field, fmt.Sprintf("must not have more than %d items.", maxItems))
		return nil, false
	}
	ok := true
	out := make([]string, 0, len(list))
	for i, item := range list {
		key := fmt.Sprintf("%s.%d", field, i)
		if item == nil {
			Add(errs, key, "must be a string.")
			ok = false
			continue
		}
		s, good := str(errs, key, item, maxLen)
		if good && check != nil {
			if rest := check(s); rest != "" {
				Add(errs, key, rest)
				good = false
			}
		}
		ok = ok && good
		out = append(out, s)
	}
	return out, ok
}
