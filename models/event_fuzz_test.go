package models

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
	"unicode/utf8"
)

// Whatever a row holds, its queue JSON is one valid JSON object with the contract's eleven
// keys, and a row of valid UTF-8 reads back unchanged. The committed corpus is in
// testdata/fuzz/FuzzMarshalQueue.
func FuzzMarshalQueue(f *testing.F) {
	f.Add("page_view", "s-1", "m-1", "https://shop.example/a?x=1&y=<b>", "shop.example", "/a", "Mozilla/5.0", "203.0.113.7", int64(3), int64(1795000000))
	f.Add("a", "\x00\xff\u2028", "", "\"\\", "", "", "\ufffd", "::1", int64(-1), int64(0))
	f.Fuzz(func(t *testing.T, typ, session, member, url, host, path, ua, ip string, seq, unix int64) {
		row := TrackedEvent{ID: "0193aaaa-0000-7000-8000-000000000000", Type: typ, SessionID: session, URL: url,
			PageHostname: host, PagePath: path, UserAgent: ua, IPAddress: ip, EventSequence: seq,
			CreatedAt: time.Unix(unix%(1<<34), 0)}
		if member != "" {
			row.AudienceMemberID = &member
		}
		out := row.MarshalQueue()
		if !json.Valid(out) || bytes.Contains(out, []byte("\n")) {
			t.Fatalf("not one line of valid JSON: %q", out)
		}
		var keys map[string]json.RawMessage
		if err := json.Unmarshal(out, &keys); err != nil || len(keys) != 11 {
			t.Fatalf("%d keys (%v): %s", len(keys), err, out)
		}
		var back QueueEvent
		if err := json.Unmarshal(out, &back); err != nil {
			t.Fatal(err)
		}
		want := row.Queue()
		if back.CreatedAt != want.CreatedAt || back.EventSequence != seq || (member == "") != (back.AudienceMemberID == nil) {
			t.Fatalf("read back %+v, want %+v", back, want)
		}
		for _, s := range []string{typ, session, member, url, host, path, ua, ip} {
			if !utf8.ValidString(s) {
				return // encoding/json writes U+FFFD for invalid bytes: nothing more to compare
			}
		}
		if back.Type != typ || back.SessionID != session || back.URL != url || back.PageHostname != host ||
			back.PagePath != path || back.UserAgent != ua || back.IPAddress != ip {
			t.Fatalf("read back %+v, want %+v", back, want)
		}
	})
}
