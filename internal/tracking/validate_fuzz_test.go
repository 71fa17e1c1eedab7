package tracking

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/eventq/eventq/internal/apperr"
	"github.com/eventq/eventq/internal/testenv"
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
// column, client-sent and server-set, both databases can store; and a body the fast path
// accepts, on either endpoint, gives exactly what the general path gives. The committed corpus
// is in testdata/fuzz/FuzzParsePublic.
func FuzzParsePublic(f *testing.F) {
	f.Add([]byte(`{"site_key":"site_1","events":[{"type":"page_view","session_id":"s","url":"https://a.example/p?q=1","event_sequence":1}]}`), "Mozilla/5.0")
	f.Add([]byte("{\"site_key\":\"k\",\"events\":[{\"type\":\"a\",\"session_id\":\"s\\u0000\",\"url\":\"https://a.example/\",\"event_sequence\":0}]}"), "UA\x00\xff")
	f.Add([]byte("{\"site_key\":\"k\xff\",\"events\":[]}"), "")
	f.Add([]byte(`{"site_key":"k","events":[{"type":"a","session_id":"s","url":"https://`+strings.Repeat("h", 300)+`/","event_sequence":"7","audience_member_id":"m"}]}`), "é")
	f.Add([]byte(" {\"events\" : [ {\"type\":\"a.b\",\"session_id\":\" s\\t\",\"url\":\"https:\\/\\/a.example\\/\",\"event_sequence\":-0,\"audience_member_id\":null,\"user_agent\":\"é\",\"ip_address\":\"::1\"} ] ,\"site_key\":\"k\"}\n"), "")
	f.Add([]byte(`{"site_key":"k","events":[{"type":"a","session_id":"s","url":"http://h/","event_sequence":1},{"type":"b","session_id":"s","url":"http://h/","event_sequence":"2","audience_member_id":"  "}]}`), "")
	f.Fuzz(func(t *testing.T, body []byte, userAgent string) {
		sameAsGeneral(t, body)
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

// sameAsGeneral fails when the fast path accepts body on an endpoint and the general path does
// not give the same site key and events.
func sameAsGeneral(t *testing.T, body []byte) {
	t.Helper()
	if siteKey, events, ok := parseFast(body, false); ok {
		wantKey, want, err := parsePublicGeneral(body)
		if err != nil || siteKey != wantKey || !reflect.DeepEqual(events, want) {
			t.Fatalf("public: fast path gave %q %+v, general path %q %+v %v", siteKey, events, wantKey, want, err)
		}
	}
	if _, events, ok := parseFast(body, true); ok {
		want, err := parsePlatformGeneral(body)
		if err != nil || !reflect.DeepEqual(events, want) {
			t.Fatalf("platform: fast path gave %+v, general path %+v %v", events, want, err)
		}
	}
}

// Bodies built from pieces that sit on the fast path's edges (white space, escapes, Unicode
// spaces the trim removes, integers in both forms, nulls, platform fields) give the general
// path's answer; enough of them are valid for the comparison to mean something.
func TestParseFastMatchesGeneral(t *testing.T) {
	strs := []string{`""`, `"  "`, `"\t"`, `"a"`, `" page_view "`, `"\u00e9"`, `"\u00A0x"`, `"\u0026\u003C"`, `"\ud83d\ude00"`, `"\u0000"`, "\"\u00a0x\u00a0\"", "\"\u2028\"", `"a\/b"`,
		`"q\"\\"`, `"x\ny"`, `"https://h.example/p?q=1&r=<2>"`, `"http:\/\/h\/"`, `"https://h.example"`, `"::1"`, `"203.0.113.1"`}
	others := []string{`null`, `0`, `-0`, `7`, `-1`, `01`, `1.5`, `1e3`, `true`, `"7"`, `" 7 "`, `[]`, `{}`}
	space := []string{"", " ", "\n\t", "\r\n "}
	keys := []string{"type", "session_id", "url", "event_sequence", "audience_member_id", "user_agent", "ip_address"}
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func(list []string) string { return list[rng.IntN(len(list))] }
	value := func(key string) string {
		switch {
		case rng.IntN(40) == 0:
			return pick(others)
		case key == "type":
			if rng.IntN(10) == 0 {
				return `"A"`
			}
			return pick([]string{`"page_view"`, `"a.b:c-d_1"`, `" x "`})
		case key == "url":
			if rng.IntN(10) == 0 {
				return pick([]string{`"ftp://h/"`, `"https://h .example/"`, `"https://"`})
			}
			return pick([]string{`"https://shop.example/p/1?ref=a&b=c"`, `"http:\/\/h\/"`, `" https://h.example "`})
		case key == "event_sequence":
			return pick([]string{`0`, `3`, `"12"`, `-0`})
		case key == "ip_address":
			return pick([]string{`"::1"`, `"203.0.113.1"`, `"fe80::1%eth0"`, `null`})
		}
		if rng.IntN(10) == 0 {
			return pick(strs)
		}
		return pick(strs[3:]) // not empty after the trim
	}
	// 5,000 random bodies in make test (each parsed for both endpoints), 20,000 in make chaos.
	bodies := 5000
	if testenv.Long() {
		bodies = 20000
	}
	accepted := 0
	for range bodies {
		var b strings.Builder
		b.WriteString(pick(space) + "{")
		var fields []string
		platform := rng.IntN(2) == 0 // a body for one endpoint, mostly: a stray key is a fallback
		if platform == (rng.IntN(20) == 0) {
			fields = append(fields, `"site_key":`+pick(space)+pick([]string{`"pk_1"`, `" pk_2 "`, `"k\"1"`, `"pk_3"`, `null`}))
		}
		var events []string
		for range 1 + rng.IntN(3) {
			var kv []string
			for _, k := range keys {
				if rng.IntN(60) > 0 && (k != "user_agent" && k != "ip_address" || platform != (rng.IntN(20) == 0)) {
					kv = append(kv, pick(space)+`"`+k+`"`+pick(space)+":"+pick(space)+value(k)+pick(space))
				}
			}
			rng.Shuffle(len(kv), func(i, j int) { kv[i], kv[j] = kv[j], kv[i] })
			events = append(events, "{"+strings.Join(kv, ",")+"}")
		}
		fields = append(fields, `"events":[`+strings.Join(events, ","+pick(space))+"]")
		rng.Shuffle(len(fields), func(i, j int) { fields[i], fields[j] = fields[j], fields[i] })
		b.WriteString(strings.Join(fields, ",") + pick(space) + "}" + pick(space))
		body := []byte(b.String())
		sameAsGeneral(t, body)
		if _, _, ok := parseFast(body, false); ok {
			accepted++
		}
		if _, _, ok := parseFast(body, true); ok {
			accepted++
		}
	}
	if accepted < bodies/20 {
		t.Fatalf("only %d of %d parses took the fast path: the comparison says little", accepted, 2*bodies)
	}
	t.Logf("%d of %d parses took the fast path", accepted, 2*bodies)
}
