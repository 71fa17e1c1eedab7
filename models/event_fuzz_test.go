package models

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
	"unicode/utf8"
)

// Whatever a row holds, its queue JSON is byte for byte what encoding/json writes for it (with
// HTML escaping off), one valid JSON object with the contract's eleven keys, and a row of
// valid UTF-8 reads back unchanged. The committed corpus is in
// testdata/fuzz/FuzzMarshalQueue.
func FuzzMarshalQueue(f *testing.F) {
	f.Add("page_view", "s-1", "m-1", "https://shop.example/a?x=1&y=<b>", "shop.example", "/a", "Mozilla/5.0", "203.0.113.7", int64(3), int64(1795000000))
	f.Add("a", "\x00\xff\u2028", "", "\"\\", "", "", "\ufffd", "::1", int64(-1), int64(0))
	f.Add("\b\f\n\r\t\x01\x1f\x7f", "\u2029\xe2\x80", "é<>&", "\xed\xa0\x80", "\U0001F600", "\xf4\x90\x80\x80", "\\u0000", "", int64(-9223372036854775808), int64(-62135596800))
	f.Fuzz(func(t *testing.T, typ, session, member, url, host, path, ua, ip string, seq, unix int64) {
		row := TrackedEvent{ID: "0193aaaa-0000-7000-8000-000000000000", Type: typ, SessionID: session, URL: url,
			PageHostname: host, PagePath: path, UserAgent: ua, IPAddress: ip, EventSequence: seq,
			CreatedAt: time.Unix(unix%(1<<34), 0)}
		if member != "" {
			row.AudienceMemberID = &member
		}
		out := row.MarshalQueue()
		if want := encodingJSON(t, row.Queue()); !bytes.Equal(out, want) {
			t.Fatalf("MarshalQueue wrote\n%q\nencoding/json writes\n%q", out, want)
		}
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

// encodingJSON is the reference: v as encoding/json writes it with HTML escaping off.
func encodingJSON(t *testing.T, v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// BenchmarkMarshalQueue compares the hand-written encoder with encoding/json on a typical row.
func BenchmarkMarshalQueue(b *testing.B) {
	member := "1003"
	row := TrackedEvent{ID: "0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", Type: "page_view", SessionID: "s-00000001",
		AudienceMemberID: &member, URL: "https://shop.example/products/1?ref=newsletter&utm_source=mail",
		PageHostname: "shop.example", PagePath: "/products/1", UserAgent: "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36",
		IPAddress: "203.0.113.7", EventSequence: 3, CreatedAt: time.Unix(1795000000, 0)}
	b.Run("hand-written", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			row.MarshalQueue()
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var buf bytes.Buffer
			enc := json.NewEncoder(&buf)
			enc.SetEscapeHTML(false)
			if err := enc.Encode(row.Queue()); err != nil {
				b.Fatal(err)
			}
		}
	})
}
