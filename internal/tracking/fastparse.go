package tracking

import (
	"encoding/json"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/eventq/eventq/internal/apperr"
	"github.com/eventq/eventq/internal/validate"
)

// parseFast is the ingestion endpoints' path for the bodies clients actually send: a JSON
// object holding site_key (public only) and events, once each; events an array of 1 to
// MaxEvents objects holding only the rules' keys, once each; every value a string, an integer
// or null; and every event valid. It decodes those straight into Inputs, without the generic
// tree of DecodeObject (which costs more than the rest of the request's parsing). Anything
// else, including every body with an error, answers ok false and takes the general path, which
// alone words the errors: so a body the fast path accepts gives what the general path gives
// (FuzzParsePublic checks this on every input it tries).
func parseFast(body []byte, platform bool) (siteKey string, events []Input, ok bool) {
	s := scanner{body: body}
	if !s.next('{') {
		return "", nil, false
	}
	var (
		siteKeyVal        any
		sawSiteKey, sawEv bool
		vals              [][maxRules]any
	)
	for first := true; ; first = false {
		if s.next('}') {
			if first {
				return "", nil, false // {} has no events
			}
			break
		}
		if !first && !s.next(',') {
			return "", nil, false
		}
		key, good := s.key()
		if !good {
			return "", nil, false
		}
		switch string(key) {
		case "site_key":
			if platform || sawSiteKey {
				return "", nil, false
			}
			sawSiteKey = true
			if siteKeyVal, good = s.scalar(); !good {
				return "", nil, false
			}
		case "events":
			if sawEv {
				return "", nil, false
			}
			sawEv = true
			if vals, good = s.events(rulesFor(platform)); !good {
				return "", nil, false
			}
		default: // another key, or one seen twice
			return "", nil, false
		}
	}
	if !sawEv || !s.end() {
		return "", nil, false
	}
	var errs apperr.FieldErrors // the general path words them; here any error means "not fast"
	if !platform {
		siteKey, _ = validate.RequiredString(&errs, "site_key", siteKeyVal, 255)
	}
	events = make([]Input, len(vals))
	for j, rule := range rulesFor(platform) {
		for i := range vals {
			rule.check(&errs, rule.field, vals[i][j], &events[i])
		}
	}
	if !errs.Empty() {
		return "", nil, false
	}
	return siteKey, events, true
}

// scanner reads the JSON of an ingestion body, one token at a time.
type scanner struct {
	body []byte
	i    int
	text string // body as a string, made on the first string value: values are slices of it
}

func (s *scanner) skipSpace() {
	for s.i < len(s.body) {
		switch s.body[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// next consumes c, after any white space, if it comes next.
func (s *scanner) next(c byte) bool {
	s.skipSpace()
	if s.i < len(s.body) && s.body[s.i] == c {
		s.i++
		return true
	}
	return false
}

// end reports whether only white space is left.
func (s *scanner) end() bool {
	s.skipSpace()
	return s.i == len(s.body)
}

// key reads an object key and its colon. Keys with escapes or non-ASCII bytes are not ours.
func (s *scanner) key() ([]byte, bool) {
	if !s.next('"') {
		return nil, false
	}
	start := s.i
	for s.i < len(s.body) {
		c := s.body[s.i]
		switch {
		case c == '"':
			key := s.body[start:s.i]
			s.i++
			return key, s.next(':')
		case c == '\\' || c < 0x20 || c >= utf8.RuneSelf:
			return nil, false
		}
		s.i++
	}
	return nil, false
}

// events reads the events array into one row of values per event, in the order of rules.
func (s *scanner) events(rules []eventRule) ([][maxRules]any, bool) {
	if !s.next('[') || s.next(']') {
		return nil, false // not an array, or an empty one
	}
	var vals [][maxRules]any
	for {
		if len(vals) == MaxEvents || !s.next('{') {
			return nil, false
		}
		var row [maxRules]any
		var seen [maxRules]bool
		for first := true; !s.next('}'); first = false {
			if !first && !s.next(',') {
				return nil, false
			}
			key, good := s.key()
			if !good {
				return nil, false
			}
			j := ruleIndex(rules, key)
			if j < 0 || seen[j] {
				return nil, false
			}
			seen[j] = true
			if row[j], good = s.scalar(); !good {
				return nil, false
			}
		}
		vals = append(vals, row)
		if s.next(']') {
			return vals, true
		}
		if !s.next(',') {
			return nil, false
		}
	}
}

func ruleIndex(rules []eventRule, key []byte) int {
	for j := range rules {
		if rules[j].field == string(key) {
			return j
		}
	}
	return -1
}

// scalar reads a value as DecodeObject would give it: a string trimmed, or nil when empty; an
// integer as a json.Number; nil for null. Other values (true, false, fractions, exponents,
// objects, arrays) answer false.
func (s *scanner) scalar() (any, bool) {
	s.skipSpace()
	if s.i == len(s.body) {
		return nil, false
	}
	switch c := s.body[s.i]; {
	case c == '"':
		str, ok := s.str()
		if !ok {
			return nil, false
		}
		return validate.EmptyToNil(str), true
	case c == 'n':
		if len(s.body)-s.i >= 4 && string(s.body[s.i:s.i+4]) == "null" {
			s.i += 4
			return nil, true
		}
	case c == '-' || c >= '0' && c <= '9':
		return s.integer()
	}
	return nil, false
}

// integer reads -?(0|[1-9][0-9]*) not followed by a fraction or an exponent.
func (s *scanner) integer() (any, bool) {
	start := s.i
	if s.body[s.i] == '-' {
		s.i++
	}
	digits := s.i
	for s.i < len(s.body) && s.body[s.i] >= '0' && s.body[s.i] <= '9' {
		s.i++
	}
	n := s.i - digits
	if n == 0 || n > 1 && s.body[digits] == '0' {
		return nil, false
	}
	if s.i < len(s.body) {
		if c := s.body[s.i]; c == '.' || c == 'e' || c == 'E' {
			return nil, false
		}
	}
	return json.Number(s.body[start:s.i]), true
}

// str reads a string value. One without escapes is a slice of the body's one string copy; one
// with escapes is decoded. Control characters, invalid UTF-8 (which DecodeObject maps
// specially) and escaped surrogates answer false.
func (s *scanner) str() (string, bool) {
	s.i++ // the opening quote
	start := s.i
	ascii := true
	var decoded []byte // set at the first escape
	for s.i < len(s.body) {
		c := s.body[s.i]
		switch {
		case c == '"':
			raw := s.body[start:s.i]
			s.i++
			if !ascii && !utf8.Valid(raw) {
				return "", false
			}
			if decoded != nil {
				return string(decoded), true
			}
			if s.text == "" {
				s.text = string(s.body)
			}
			return s.text[start : s.i-1], true
		case c == '\\':
			if decoded == nil {
				decoded = append(make([]byte, 0, 64), s.body[start:s.i]...)
			}
			var good bool
			if decoded, good = s.escape(decoded); !good {
				return "", false
			}
			continue
		case c < 0x20:
			return "", false
		case c >= utf8.RuneSelf:
			ascii = false
		}
		if decoded != nil {
			decoded = append(decoded, c)
		}
		s.i++
	}
	return "", false
}

// escape decodes the escape at s.i onto b. A \u escape of a UTF-16 surrogate answers false:
// encoding/json's rules for pairing them are left to the general path.
func (s *scanner) escape(b []byte) ([]byte, bool) {
	if s.i+1 == len(s.body) {
		return b, false
	}
	c := s.body[s.i+1]
	s.i += 2
	switch c {
	case '"', '\\', '/':
		return append(b, c), true
	case 'b':
		return append(b, '\b'), true
	case 'f':
		return append(b, '\f'), true
	case 'n':
		return append(b, '\n'), true
	case 'r':
		return append(b, '\r'), true
	case 't':
		return append(b, '\t'), true
	case 'u':
		if len(s.body)-s.i < 4 {
			return b, false
		}
		r := rune(0)
		for _, h := range s.body[s.i : s.i+4] {
			switch {
			case h >= '0' && h <= '9':
				r = r<<4 | rune(h-'0')
			case h >= 'a' && h <= 'f':
				r = r<<4 | rune(h-'a'+10)
			case h >= 'A' && h <= 'F':
				r = r<<4 | rune(h-'A'+10)
			default:
				return b, false
			}
		}
		s.i += 4
		if utf16.IsSurrogate(r) {
			return b, false
		}
		return utf8.AppendRune(b, r), true
	}
	return b, false
}

// validType is the type rule's format, [a-z0-9_.:-]+.
func validType(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '_', c == '.', c == ':', c == '-':
		default:
			return false
		}
	}
	return true
}
