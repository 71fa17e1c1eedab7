package validate

import "testing"

func TestHTTPURL(t *testing.T) {
	for s, want := range map[string]bool{
		"https://a.example":             true,
		"http://127.0.0.1:8080/p?q=1#f": true,
		"http://[::1]:8080":             true,
		"HTTPS://A.EXAMPLE":             true,
		"ftp://a.example":               false,
		"//a.example/p":                 false,
		"/relative":                     false,
		"https://":                      false,
		"http://:8080":                  false,
		"https://a.example/a b":         false,
		"https://a.example/\t":          false,
		"https://a.exa mple":            false,
		"":                              false,
		"a.example":                     false,
	} {
		if got := HTTPURL(s); got != want {
			t.Errorf("HTTPURL(%q) = %v, want %v", s, got, want)
		}
	}
}
