package paginate

import (
	"encoding/base64"
	"testing"
)

// Cursors are Laravel's: URL-safe base64 without padding of the item's id and direction, so a
// cursor from the old service reads here, and the reverse.
func TestCursorsAreLaravels(t *testing.T) {
	c := Cursor{ID: 15, Next: true}
	enc := c.Encode()
	raw, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil || string(raw) != `{"id":15,"_pointsToNextItems":true}` {
		t.Fatalf("%s decodes to %s (%v)", enc, raw, err)
	}
	for _, s := range []string{enc, base64.URLEncoding.EncodeToString(raw),
		base64.RawURLEncoding.EncodeToString([]byte(`{"id":"15","_pointsToNextItems":true}`))} {
		if got, ok := Decode(s); !ok || got != c {
			t.Fatalf("Decode(%q) = %+v %v", s, got, ok)
		}
	}
	for _, bad := range []string{"", "garbage!", base64.RawURLEncoding.EncodeToString([]byte(`{"id":15}`)),
		base64.RawURLEncoding.EncodeToString([]byte(`{"id":-1,"_pointsToNextItems":false}`)),
		base64.RawURLEncoding.EncodeToString([]byte(`{"id":9223372036854775808,"_pointsToNextItems":true}`)),
		base64.RawURLEncoding.EncodeToString([]byte(`{"id":18446744073709551615,"_pointsToNextItems":true}`)),
		base64.RawURLEncoding.EncodeToString([]byte(`{"id":1e30,"_pointsToNextItems":true}`))} {
		if _, ok := Decode(bad); ok {
			t.Fatalf("Decode(%q) accepted", bad)
		}
	}
}
