package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/eventq/eventq/internal/testenv"
)

// Input the database cannot store as sent is refused naming the field (client fields) or
// made storable (server-set fields), on SQLite and Postgres alike: never a 5xx.
func TestTrackRefusesWhatTheDatabaseCannotStore(t *testing.T) {
	e := startAPI(t)
	tn := testenv.MustTenant(t, e.DB, true)
	formatInvalid := func(field string) string {
		msg := fmt.Sprintf("The %s field format is invalid.", strings.ReplaceAll(field, "_", " "))
		return fmt.Sprintf(`{"message":%q,"errors":{%q:[%q]}}`, msg, field, msg)
	}
	event := `{"type":"page_view","session_id":"s-1","url":"https://shop.example/a","event_sequence":1}`
	withField := func(field, raw string) string {
		return strings.Replace(fmt.Sprintf(`{"site_key":%q,"events":[%s]}`, tn.SiteKey, event),
			`"event_sequence":1`, `"event_sequence":1,"`+field+`":`+raw, 1)
	}
	for _, tc := range []struct{ name, body, field string }{
		{"a NUL in session_id", withField("session_id", `"s\u0000x"`), "events.0.session_id"},
		{"a NUL in audience_member_id", withField("audience_member_id", `"m\u0000"`), "events.0.audience_member_id"},
		{"a NUL in type", withField("type", `"page\u0000view"`), "events.0.type"},
		{"a NUL in url", withField("url", `"https://shop.example/\u0000"`), "events.0.url"},
		{"a NUL in site_key", `{"site_key":"site\u0000","events":[` + event + `]}`, "site_key"},
		{"invalid UTF-8 in session_id", withField("session_id", "\"s\xff\xfe\""), "events.0.session_id"},
		{"invalid UTF-8 in audience_member_id", withField("audience_member_id", "\"\xc3(\""), "events.0.audience_member_id"},
		{"invalid UTF-8 in site_key", "{\"site_key\":\"k\xff\",\"events\":[" + event + "]}", "site_key"},
	} {
		t.Run("422 for "+tc.name, func(t *testing.T) {
			assertBody(t, e.Do(t, "POST", "/api/track", "", []byte(tc.body)), 422, formatInvalid(tc.field))
			if rows, n := e.EventRows(t, tn), e.QueueLen(t, tn); rows != 0 || n != 0 {
				t.Fatalf("refused request left %d rows and %d queued", rows, n)
			}
		})
	}
	t.Run("422 for invalid UTF-8 outside a string, as for any malformed JSON", func(t *testing.T) {
		res := e.Do(t, "POST", "/api/track", "", []byte("{\"site_key\":\xff}"))
		if res.Status != 422 || e.EventRows(t, tn) != 0 {
			t.Fatalf("%d %s", res.Status, res.Body)
		}
	})
	t.Run("422 for a NUL in a platform user_agent and a zone in ip_address", func(t *testing.T) {
		for field, raw := range map[string]string{"user_agent": `"Bot\u0000"`, "ip_address": `"fe80::1%eth0"`} {
			body := strings.Replace(`{"events":[`+event+`]}`, `"event_sequence":1`, `"event_sequence":1,"`+field+`":`+raw, 1)
			res := e.Do(t, "POST", "/api/platform/track", tn.Token, []byte(body))
			if res.Status != 422 || !strings.Contains(string(res.Body), `"events.0.`+field+`"`) {
				t.Fatalf("%s: %d %s", field, res.Status, res.Body)
			}
		}
		if rows := e.EventRows(t, tn); rows != 0 {
			t.Fatalf("%d rows", rows)
		}
	})
}

func TestTrackStoresServerSetFieldsSanitised(t *testing.T) {
	e := startAPI(t, "TRUSTED_PROXIES=127.0.0.1")
	tn := testenv.MustTenant(t, e.DB, true)

	t.Run("a NUL and invalid UTF-8 in the User-Agent header become U+FFFD", func(t *testing.T) {
		body := fmt.Sprintf(`{"site_key":%q,"events":[{"type":"page_view","session_id":"s","url":"https://shop.example/","event_sequence":1}]}`, tn.SiteKey)
		res := rawRequest(t, e.Base, "POST /api/track HTTP/1.1\r\nHost: x\r\nUser-Agent: Bot\x00/\xff1\r\n"+
			fmt.Sprintf("Content-Length: %d\r\n\r\n%s", len(body), body))
		if res.StatusCode != 202 {
			t.Fatalf("status %d", res.StatusCode)
		}
		if got := e.MustRead(t, tn).Data.Events[0].UserAgent; got != "Bot\uFFFD/\uFFFD1" {
			t.Fatalf("user agent %q", got)
		}
	})
	t.Run("a 300-character hostname is cut to its column's 255", func(t *testing.T) {
		host := strings.Repeat("a", 300) + ".example"
		ev := pageView("s", 2)
		ev["url"] = "https://" + host + "/p"
		e.MustTrack(t, tn, ev)
		got := e.MustRead(t, tn).Data.Events[1]
		if got.PageHostname != host[:255] || got.URL != "https://"+host+"/p" {
			t.Fatalf("hostname %q (%d chars)", got.PageHostname, len(got.PageHostname))
		}
	})
	t.Run("a hostname cut inside a multi-byte character keeps whole characters", func(t *testing.T) {
		host := strings.Repeat("é", 300)
		ev := pageView("s", 3)
		ev["url"] = "https://" + host + "/"
		e.MustTrack(t, tn, ev)
		got := e.MustRead(t, tn).Data.Events[2].PageHostname
		if !utf8.ValidString(got) || utf8.RuneCountInString(got) != 255 {
			t.Fatalf("hostname %d chars, valid %v", utf8.RuneCountInString(got), utf8.ValidString(got))
		}
	})
	t.Run("a forwarded address loses its zone", func(t *testing.T) {
		body, _ := json.Marshal(map[string]any{"site_key": tn.SiteKey, "events": []any{pageView("s", 4)}})
		res := e.Do(t, "POST", "/api/track", "", body, "X-Forwarded-For", "fe80::1%"+strings.Repeat("x", 60))
		if res.Status != 202 {
			t.Fatalf("%d %s", res.Status, res.Body)
		}
		if got := e.MustRead(t, tn).Data.Events[3].IPAddress; got != "fe80::1" {
			t.Fatalf("ip %q", got)
		}
	})
}

// Every oversized body gets a 413 the client can read, however large, from Go's client and
// from curl; nothing is stored.
func TestOversizedBodiesGetA413TheClientReads(t *testing.T) {
	testenv.OnOneDatabase(t)
	e := startAPI(t)
	tn := testenv.MustTenant(t, e.DB, true)
	for _, size := range []int{70 << 10, 2 << 20, 20 << 20} {
		body := bytes.Repeat([]byte("x"), size)
		t.Run(fmt.Sprintf("Go client, %d KiB", size>>10), func(t *testing.T) {
			for i := 0; i < 5; i++ { // a reset is a race: try it more than once
				assertBody(t, e.Do(t, "POST", "/api/track", "", body), 413, `{"message":"Content Too Large."}`)
			}
		})
		t.Run(fmt.Sprintf("curl, %d KiB", size>>10), func(t *testing.T) {
			if _, err := exec.LookPath("curl"); err != nil {
				t.Fatal("curl not found: install the Debian package curl (make test does this)")
			}
			for i := 0; i < 3; i++ {
				cmd := exec.Command("curl", "-sS", "-o", "-", "-w", " %{http_code}", "--data-binary", "@-", e.Base+"/api/track")
				cmd.Stdin = bytes.NewReader(body)
				out, err := cmd.CombinedOutput()
				if err != nil || string(out) != `{"message":"Content Too Large."} 413` {
					t.Fatalf("curl: %v: %s", err, out)
				}
			}
		})
	}
	t.Run("a gzip body decoding to 50 MiB", func(t *testing.T) {
		// routes' bomb: compressing 50 MiB here took seconds under the race detector.
		bomb, err := os.ReadFile("../../internal/httpx/testdata/bomb.gzip")
		if err != nil {
			t.Fatal(err)
		}
		for _, path := range []string{"/api/track", "/api/platform/track"} {
			assertBody(t, e.Do(t, "POST", path, tn.Token, bomb, "Content-Encoding", "gzip"), 413, `{"message":"Content Too Large."}`)
		}
	})
	t.Run("an unknown coding", func(t *testing.T) {
		event := fmt.Sprintf(`{"site_key":%q,"events":[%s]}`, tn.SiteKey, pageView("s", 1))
		assertBody(t, e.Do(t, "POST", "/api/track", "", []byte(event), "Content-Encoding", "compress"), 415, `{"message":"Unsupported Media Type."}`)
		// The webhook decodes no unsigned body: whatever the coding and the path's form, 200.
		for _, path := range []string{"/api/webhooks/psp", "/api/webhooks/psp/", "/api/webhooks/stripe/"} {
			for _, coding := range []string{"compress", "gzip", "gzip, gzip", "br, br, br"} {
				if res := e.Do(t, "POST", path, "", []byte("{}"), "Content-Encoding", coding); res.Status != 200 || string(res.Body) != `{"received":true}` {
					t.Fatalf("webhook %s %s: %d %s", path, coding, res.Status, res.Body)
				}
			}
		}
	})
	if rows := e.EventRows(t, tn); rows != 0 {
		t.Fatalf("%d rows", rows)
	}
	if n := e.QueueLen(t, tn); n != 0 {
		t.Fatalf("%d queued", n)
	}
}

func TestEdgeCasesOfTheWire(t *testing.T) {
	e := startAPI(t)
	tn := testenv.MustTenant(t, e.DB, true)

	t.Run("the webhook answers 200 to a multipart body", func(t *testing.T) {
		var buf bytes.Buffer
		w := multipart.NewWriter(&buf)
		w.WriteField("type", "checkout.session.completed")
		w.Close()
		for _, ct := range []string{w.FormDataContentType(), "multipart/form-data", "multipart/form-data; boundary=", "application/x-www-form-urlencoded"} {
			res := e.Do(t, "POST", "/api/webhooks/psp", "", buf.Bytes(), "Content-Type", ct)
			if res.Status != 200 {
				t.Fatalf("%s: %d %s", ct, res.Status, res.Body)
			}
		}
	})
	t.Run("a token with an empty id is 401", func(t *testing.T) {
		_, secret, _ := strings.Cut(tn.Token, "|")
		assertBody(t, e.Do(t, "GET", "/api/platform/events", "|"+secret, nil), 401, `{"message":"Unauthenticated."}`)
	})
	t.Run("a repeated query parameter takes its last value", func(t *testing.T) {
		e.MustTrack(t, tn, pageView("s", 1), pageView("s", 2), pageView("s", 3))
		res := e.Do(t, "DELETE", "/api/platform/events?count=1&count=2", tn.Token, nil)
		if res.Status != 204 || e.QueueLen(t, tn) != 1 {
			t.Fatalf("%d, queue %d, want 1 left", res.Status, e.QueueLen(t, tn))
		}
		assertBody(t, e.Do(t, "DELETE", "/api/platform/events?count=1&count=x", tn.Token, nil), 422,
			`{"message":"The count field must be an integer.","errors":{"count":["The count field must be an integer."]}}`)
		if e.QueueLen(t, tn) != 1 {
			t.Fatal("a refused trim removed events")
		}
	})
}

// rawRequest writes req as is (bytes Go's client would refuse to send) and reads the answer.
func rawRequest(t *testing.T, base, req string) *http.Response {
	t.Helper()
	conn, err := net.DialTimeout("tcp", strings.TrimPrefix(base, "http://"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, req); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res
}
