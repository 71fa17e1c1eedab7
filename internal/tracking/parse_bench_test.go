package tracking

import (
	"encoding/json"
	"fmt"
	"testing"
)

// trackBody is a POST /api/track body of n events as a Go client's encoding/json writes it
// (its & escaped as \u0026).
func trackBody(n int) []byte {
	events := make([]map[string]any, n)
	for i := range events {
		events[i] = map[string]any{"type": "page_view", "session_id": fmt.Sprintf("s-%08x", i/5),
			"url": fmt.Sprintf("https://shop.example/products/%d?ref=newsletter&utm_source=mail", i), "event_sequence": i % 5}
		if i%4 == 0 {
			events[i]["audience_member_id"] = "1003"
		}
	}
	b, _ := json.Marshal(map[string]any{"site_key": "pk_0123456789abcdef0123456789abcdef", "events": events})
	return b
}

// BenchmarkParsePublic compares ParsePublic (the fast path, for these bodies) with the general
// path it falls back to, on the same bodies.
func BenchmarkParsePublic(b *testing.B) {
	for _, n := range []int{1, 50} {
		body := trackBody(n)
		for _, path := range []struct {
			name  string
			parse func([]byte) (string, []Input, error)
		}{{"fast", ParsePublic}, {"general", parsePublicGeneral}} {
			b.Run(fmt.Sprintf("%s/%d", path.name, n), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, _, err := path.parse(body); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
