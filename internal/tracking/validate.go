// Package tracking validates and stores tracked events, and appends them to the tenant's
// queue when UseQueueEvents is active.
package tracking

import (
	"fmt"
	"net/netip"
	"net/url"
	"strconv"

	"github.com/eventq/eventq/internal/apperr"
	"github.com/eventq/eventq/internal/validate"
)

// Limits of one ingestion request; docs/api.md lists them for clients.
const (
	MaxBodyBytes    = 64 << 10
	MaxEvents       = 100
	maxTypeLen      = 64
	maxSessionLen   = 128
	maxURLLen       = 2048
	maxMemberIDLen  = 255
	maxUserAgentLen = 1024
)

// Input is one validated event as a client sent it; the server fills in the rest.
type Input struct {
	Type             string
	SessionID        string
	URL              string
	EventSequence    int64
	AudienceMemberID *string
	// UserAgent and IPAddress are only accepted from server-side (token) callers.
	UserAgent *string
	IPAddress *string

	parsed *url.URL // URL parsed by its rule, for the row's hostname and path
}

// ParsePublic validates the body of POST /api/track: {"site_key", "events": [...]}.
// Errors are apperr.Invalid with Laravel's messages keyed by field path.
func ParsePublic(body []byte) (siteKey string, events []Input, err error) {
	if siteKey, events, ok := parseFast(body, false); ok {
		return siteKey, events, nil
	}
	return parsePublicGeneral(body)
}

// parsePublicGeneral is ParsePublic for any body: the generic decode, and every rule's message.
func parsePublicGeneral(body []byte) (siteKey string, events []Input, err error) {
	in := validate.DecodeObject(body)
	var errs apperr.FieldErrors
	siteKey, _ = validate.RequiredString(&errs, "site_key", in["site_key"], 255)
	events = parseEvents(&errs, in, false)
	return siteKey, events, errs.Err()
}

// ParsePlatform validates the body of POST /api/platform/track: {"events": [...]}, where each
// event may also carry user_agent and ip_address.
func ParsePlatform(body []byte) ([]Input, error) {
	if _, events, ok := parseFast(body, true); ok {
		return events, nil
	}
	return parsePlatformGeneral(body)
}

// parsePlatformGeneral is ParsePlatform for any body.
func parsePlatformGeneral(body []byte) ([]Input, error) {
	in := validate.DecodeObject(body)
	var errs apperr.FieldErrors
	events := parseEvents(&errs, in, true)
	return events, errs.Err()
}

type eventRule struct {
	field string
	check func(errs *apperr.FieldErrors, path string, v any, ev *Input)
}

// maxRules is the number of rules of the platform endpoint, which has the most.
const maxRules = 7

// The rules of each event, in Laravel's order; the platform endpoint adds two.
var (
	publicRules = []eventRule{
		{"type", func(errs *apperr.FieldErrors, p string, v any, ev *Input) {
			if s, good := validate.RequiredString(errs, p, v, maxTypeLen); good {
				if !validType(s) {
					validate.Add(errs, p, "format is invalid.")
				}
				ev.Type = s
			}
		}},
		{"session_id", func(errs *apperr.FieldErrors, p string, v any, ev *Input) {
			ev.SessionID, _ = validate.RequiredString(errs, p, v, maxSessionLen)
		}},
		{"url", func(errs *apperr.FieldErrors, p string, v any, ev *Input) {
			if s, good := validate.RequiredString(errs, p, v, maxURLLen); good {
				u, valid := validate.ParseHTTPURL(s)
				if !valid {
					validate.Add(errs, p, "must be a valid URL.")
				}
				ev.URL, ev.parsed = s, u
			}
		}},
		{"event_sequence", func(errs *apperr.FieldErrors, p string, v any, ev *Input) {
			if v == nil {
				validate.Required(errs, p)
				return
			}
			ev.EventSequence, _ = validate.Integer(errs, p, v, 0)
		}},
		{"audience_member_id", func(errs *apperr.FieldErrors, p string, v any, ev *Input) {
			ev.AudienceMemberID = validate.NullableString(errs, p, v, maxMemberIDLen)
		}},
	}
	platformRules = append(publicRules[:len(publicRules):len(publicRules)],
		eventRule{"user_agent", func(errs *apperr.FieldErrors, p string, v any, ev *Input) {
			ev.UserAgent = validate.NullableString(errs, p, v, maxUserAgentLen)
		}},
		eventRule{"ip_address", func(errs *apperr.FieldErrors, p string, v any, ev *Input) {
			if s := validate.NullableString(errs, p, v, maxIPAddressLen); s != nil {
				// Laravel's ip rule (PHP's FILTER_VALIDATE_IP) has no IPv6 zones.
				if a, err := netip.ParseAddr(*s); err != nil || a.Zone() != "" {
					validate.Add(errs, p, "must be a valid IP address.")
					return
				}
				ev.IPAddress = s
			}
		}})
)

func rulesFor(platform bool) []eventRule {
	if platform {
		return platformRules
	}
	return publicRules
}

func parseEvents(errs *apperr.FieldErrors, in map[string]any, platform bool) []Input {
	raw, present := in["events"]
	list, isList := raw.([]any)
	switch {
	case !present || raw == nil || (isList && len(list) == 0):
		validate.Required(errs, "events")
		return nil
	case !isList:
		validate.Add(errs, "events", "must be an array.")
		return nil
	case len(list) > MaxEvents:
		// One message, the items unchecked: the answer's size and cost do not grow with them.
		validate.Add(errs, "events", fmt.Sprintf("must not have more than %d items.", MaxEvents))
		return nil
	}
	events := make([]Input, len(list))
	prefixes := make([]string, len(list)) // "events.3.": built once, not per rule
	for i := range list {
		prefixes[i] = "events." + strconv.Itoa(i) + "."
	}
	for _, rule := range rulesFor(platform) { // Laravel expands each wildcard rule over all items in turn
		for i, item := range list {
			obj, _ := item.(map[string]any)
			rule.check(errs, prefixes[i]+rule.field, obj[rule.field], &events[i])
		}
	}
	return events
}
