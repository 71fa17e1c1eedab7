package tracking

import (
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/eventq/eventq/internal/apperr"
)

// storable reports why s could not be stored in a column of max characters, or "".
func storable(s string, max int) string {
	switch {
	case !utf8.ValidString(s):
		return "invalid UTF-8"
	case strings.IndexByte(s, 0) >= 0:
		return "a NUL"
	case utf8.RuneCountInString(s) > max:
		return "too long"
	}
	return ""
}

// Whatever the body, the validator either refuses it with a 422 or returns events whose every
// column, client-sent and server-set, both databases can store. The committed corpus is in
// testdata/fuzz/FuzzParsePublic.
func FuzzParsePublic(f *testing.F) {
	f.Add([]byte(`{"site_key":"site_1","events":[{"type":"page_view","session_id":"s","url":"https://a.example/p?q=1","event_sequence":1}]}`), "Mozilla/5.0")
	f.Add([]byte("{\"site_key\":\"k\",\"events\":[{\"type\":\"a\",\"session_id\":\"s\\u0000\",\"url\":\"https://a.example/\",\"event_sequence\":0}]}"), "UA\x00\xff")
	f.Add([]byte("{\"site_key\":\"k\xff\",\"events\":[]}"), "")
	f.Add([]byte(`{"site_key":"k","events":[{"type":"a","session_id":"s","url":"https://`+strings.Repeat("h", 300)+`/","event_sequence":"7","audience_member_id":"m"}]}`), "é")
	f.Fuzz(func(t *testing.T, body []byte, userAgent string) {
		siteKey, events, err := ParsePublic(body)
		if err != nil {
			var ae *apperr.Error
			if !errors.As(err, &ae) || ae.Code != apperr.Invalid {
				t.Fatalf("error %v is not a validation error", err)
			}
			return
		}
		if why := storable(siteKey, 255); why != "" {
			t.Fatalf("site key %q accepted with %s", siteKey, why)
		}
		for i, ev := range events {
			row := newRow("00000000-0000-7000-8000-000000000000", 1, ev, Client{UserAgent: userAgent, IPAddress: "203.0.113.7"}, time.Now())
			for _, c := range []struct {
				name, value string
				max         int
			}{
				{"type", row.Type, maxTypeLen}, {"session_id", row.SessionID, maxSessionLen}, {"url", row.URL, maxURLLen},
				{"page_hostname", row.PageHostname, maxHostnameLen}, {"page_path", row.PagePath, 1 << 20},
				{"user_agent", row.UserAgent, maxUserAgentLen}, {"ip_address", row.IPAddress, maxIPAddressLen},
			} {
				if why := storable(c.value, c.max); why != "" {
					t.Fatalf("event %d: %s %q stored with %s", i, c.name, c.value, why)
				}
			}
			if m := row.AudienceMemberID; m != nil {
				if why := storable(*m, maxMemberIDLen); why != "" {
					t.Fatalf("event %d: audience_member_id %q accepted with %s", i, *m, why)
				}
			}
		}
	})
}
