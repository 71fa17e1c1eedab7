package tracking

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/eventq/eventq/internal/apperr"
)

// withoutParsed returns events without the parsed URLs the rules keep for newRow.
func withoutParsed(events []Input) []Input {
	for i := range events {
		if events[i].parsed == nil {
			panic("tracking: an accepted event without its parsed URL")
		}
		events[i].parsed = nil
	}
	return events
}

// fieldErrors flattens a validation error to field → messages, or nil for no error.
func fieldErrors(t *testing.T, err error) map[string][]string {
	t.Helper()
	if err == nil {
		return nil
	}
	var ae *apperr.Error
	if !errors.As(err, &ae) || ae.Code != apperr.Invalid || ae.Fields == nil {
		t.Fatalf("%v is not a validation error", err)
	}
	out := map[string][]string{}
	for _, k := range ae.Fields.Keys() {
		out[k] = ae.Fields.Messages(k)
	}
	return out
}

const okEvent = `{"type":"page_view","session_id":"s","url":"https://a.example/p","event_sequence":1}`

func TestParsePublic(t *testing.T) {
	member := "m-1"
	tests := []struct {
		name    string
		body    string
		siteKey string
		events  []Input
		errs    map[string][]string
	}{
		{"one event", `{"site_key":"k","events":[` + okEvent + `]}`, "k",
			[]Input{{Type: "page_view", SessionID: "s", URL: "https://a.example/p", EventSequence: 1}}, nil},
		{"member id and a sequence sent as a string", `{"site_key":"k","events":[{"type":"buy","session_id":"s","url":"http://a.example","event_sequence":"7","audience_member_id":"m-1"}]}`, "k",
			[]Input{{Type: "buy", SessionID: "s", URL: "http://a.example", EventSequence: 7, AudienceMemberID: &member}}, nil},
		{"not JSON", `{`, "", nil, map[string][]string{
			"site_key": {"The site key field is required."}, "events": {"The events field is required."}}},
		{"empty events", `{"site_key":"k","events":[]}`, "k", nil, map[string][]string{
			"events": {"The events field is required."}}},
		{"events not a list", `{"site_key":"k","events":{}}`, "k", nil, map[string][]string{
			"events": {"The events field must be an array."}}},
		{"too many events", `{"site_key":"k","events":[` + strings.Repeat(okEvent+",", MaxEvents) + okEvent + `]}`, "k", nil, map[string][]string{
			"events": {"The events field must not have more than 100 items."}}},
		{"every rule of an event", `{"site_key":"k","events":[{"type":"Page View","url":"ftp://a.example","event_sequence":-1}]}`, "k", nil, map[string][]string{
			"events.0.type":           {"The events.0.type field format is invalid."},
			"events.0.session_id":     {"The events.0.session id field is required."},
			"events.0.url":            {"The events.0.url field must be a valid URL."},
			"events.0.event_sequence": {"The events.0.event sequence field must be at least 0."}}},
		{"a URL with a space", `{"site_key":"k","events":[{"type":"a","session_id":"s","url":"https://a.example/a b","event_sequence":0}]}`, "k", nil, map[string][]string{
			"events.0.url": {"The events.0.url field must be a valid URL."}}},
		{"a NUL in a client string", `{"site_key":"k","events":[{"type":"a","session_id":"s\u0000","url":"https://a.example","event_sequence":0}]}`, "k", nil, map[string][]string{
			"events.0.session_id": {"The events.0.session id field format is invalid."}}},
		{"the platform's fields are ignored", `{"site_key":"k","events":[{"type":"a","session_id":"s","url":"https://a.example","event_sequence":0,"user_agent":"x","ip_address":"bad"}]}`, "k",
			[]Input{{Type: "a", SessionID: "s", URL: "https://a.example", EventSequence: 0}}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			siteKey, events, err := ParsePublic([]byte(tc.body))
			got := fieldErrors(t, err)
			if !reflect.DeepEqual(got, tc.errs) {
				t.Fatalf("errors\n got %q\nwant %q", got, tc.errs)
			}
			if siteKey != tc.siteKey {
				t.Fatalf("site key %q, want %q", siteKey, tc.siteKey)
			}
			if tc.errs == nil && !reflect.DeepEqual(withoutParsed(events), tc.events) {
				t.Fatalf("events\n got %+v\nwant %+v", events, tc.events)
			}
		})
	}
}

func TestParsePlatform(t *testing.T) {
	ua, ip := "curl/8", "2001:db8::1"
	tests := []struct {
		name   string
		body   string
		events []Input
		errs   map[string][]string
	}{
		{"user agent and address", `{"events":[{"type":"a","session_id":"s","url":"https://a.example","event_sequence":2,"user_agent":"curl/8","ip_address":"2001:db8::1"}]}`,
			[]Input{{Type: "a", SessionID: "s", URL: "https://a.example", EventSequence: 2, UserAgent: &ua, IPAddress: &ip}}, nil},
		{"null user agent and address", `{"events":[{"type":"a","session_id":"s","url":"https://a.example","event_sequence":2,"user_agent":null,"ip_address":null}]}`,
			[]Input{{Type: "a", SessionID: "s", URL: "https://a.example", EventSequence: 2}}, nil},
		{"an address with a zone", `{"events":[{"type":"a","session_id":"s","url":"https://a.example","event_sequence":2,"ip_address":"fe80::1%eth0"}]}`, nil,
			map[string][]string{"events.0.ip_address": {"The events.0.ip address field must be a valid IP address."}}},
		{"not an address", `{"events":[{"type":"a","session_id":"s","url":"https://a.example","event_sequence":2,"ip_address":"300.1.1.1"}]}`, nil,
			map[string][]string{"events.0.ip_address": {"The events.0.ip address field must be a valid IP address."}}},
		{"a second event's errors keep their index", `{"events":[` + okEvent + `,{"type":"a","session_id":"s","url":"https://a.example"}]}`, nil,
			map[string][]string{"events.1.event_sequence": {"The events.1.event sequence field is required."}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			events, err := ParsePlatform([]byte(tc.body))
			if got := fieldErrors(t, err); !reflect.DeepEqual(got, tc.errs) {
				t.Fatalf("errors\n got %q\nwant %q", got, tc.errs)
			}
			if tc.errs == nil && !reflect.DeepEqual(withoutParsed(events), tc.events) {
				t.Fatalf("events\n got %+v\nwant %+v", events, tc.events)
			}
		})
	}
}

// The bodies clients send take the fast path (which FuzzParsePublic holds to the general
// path's answer); the others, and every body with an error, take the general path.
func TestParseFastTakesCommonBodies(t *testing.T) {
	event := `{"type":"page_view","session_id":"s-1","url":"https://shop.example/p/1?ref=a&b=c","event_sequence":3`
	fast := map[string]struct {
		body     string
		platform bool
	}{
		"one event":             {`{"site_key":"pk_1","events":[` + event + `}]}`, false},
		"member and a string n": {`{"site_key":"pk_1","events":[` + event + `,"audience_member_id":"42"},{"type":"a","session_id":"s","url":"http://h/","event_sequence":"7"}]}`, false},
		"escapes":               {`{"site_key":"pk_\u0031","events":[{"type":"a","session_id":"s\"q\u00e9","url":"https:\/\/h.example\/x?a=1\u0026b=\u003c","event_sequence":0}]}`, false},
		"pretty printed":        {"{\n  \"events\": [\n    " + event + ",\n \"audience_member_id\": null\n    }\n  ],\n  \"site_key\": \"pk_1\"\n}\n", false},
		"platform fields":       {`{"events":[` + event + `,"user_agent":"curl/8","ip_address":"203.0.113.9"}]}`, true},
	}
	for name, c := range fast {
		if _, _, ok := parseFast([]byte(c.body), c.platform); !ok {
			t.Errorf("%s: not taken by the fast path", name)
		}
		sameAsGeneral(t, []byte(c.body))
	}
	general := map[string]string{
		"unknown key":       `{"site_key":"pk_1","extra":1,"events":[` + event + `}]}`,
		"unknown event key": `{"site_key":"pk_1","events":[` + event + `,"x":1}]}`,
		"duplicate key":     `{"site_key":"a","site_key":"pk_1","events":[` + event + `}]}`,
		"surrogate escape":  `{"site_key":"pk_1","events":[{"type":"a","session_id":"\ud83d\ude00","url":"http://h/","event_sequence":1}]}`,
		"invalid UTF-8":     "{\"site_key\":\"pk_\xff\",\"events\":[" + event + "}]}",
		"fraction":          `{"site_key":"pk_1","events":[{"type":"a","session_id":"s","url":"http://h/","event_sequence":1.0}]}`,
		"boolean":           `{"site_key":"pk_1","events":[{"type":"a","session_id":"s","url":"http://h/","event_sequence":true}]}`,
		"invalid type":      `{"site_key":"pk_1","events":[{"type":"A","session_id":"s","url":"http://h/","event_sequence":1}]}`,
		"missing site key":  `{"events":[` + event + `}]}`,
		"trailing brace":    `{"site_key":"pk_1","events":[` + event + `}]}}`,
		"empty events":      `{"site_key":"pk_1","events":[]}`,
	}
	for name, body := range general {
		if _, _, ok := parseFast([]byte(body), false); ok {
			t.Errorf("%s: taken by the fast path", name)
		}
	}
	// The general path keeps its answers for two of them: the trailing brace is accepted (as
	// encoding/json's decoder reads one value), the surrogate pair decoded.
	for _, name := range []string{"trailing brace", "surrogate escape"} {
		if key, _, err := ParsePublic([]byte(general[name])); err != nil || key != "pk_1" {
			t.Errorf("%s: general path gave %q, %v", name, key, err)
		}
	}
}
