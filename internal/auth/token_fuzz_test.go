package auth

import (
	"strings"
	"testing"
)

// A bearer value is split into id and secret only when both are there; the parts always
// rebuild the value. The committed corpus is in testdata/fuzz/FuzzSplitToken.
func FuzzSplitToken(f *testing.F) {
	for _, seed := range []string{"12|abc", "|abc", "12|", "abc", "", "1|2|3", "\x00|\xff"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, token string) {
		id, secret, ok := splitToken(token)
		if !ok {
			if token != "" && (strings.IndexByte(token, '|') < 0 || id != "" && secret != "") {
				t.Fatalf("%q refused, split as %q, %q", token, id, secret)
			}
			return
		}
		if secret == "" || (strings.Contains(token, "|") && (id == "" || id+"|"+secret != token)) || (!strings.Contains(token, "|") && secret != token) {
			t.Fatalf("%q split as %q, %q", token, id, secret)
		}
	})
}

func TestSplitToken(t *testing.T) {
	for _, tc := range []struct {
		token, id, secret string
		ok                bool
	}{
		{"12|abc", "12", "abc", true},
		{"abc", "", "abc", true},
		{"1|a|b", "1", "a|b", true},
		{"|abc", "", "abc", false},
		{"12|", "12", "", false},
		{"", "", "", false},
	} {
		id, secret, ok := splitToken(tc.token)
		if id != tc.id || secret != tc.secret || ok != tc.ok {
			t.Errorf("splitToken(%q) = %q, %q, %v; want %q, %q, %v", tc.token, id, secret, ok, tc.id, tc.secret, tc.ok)
		}
	}
}
