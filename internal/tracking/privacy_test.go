package tracking

import "testing"

func TestAnonymizeIP(t *testing.T) {
	for in, want := range map[string]string{
		"203.0.113.7":           "203.0.113.0",
		"203.0.113.0":           "203.0.113.0",
		"2001:db8:1:2::7":       "2001:db8:1::",
		"2001:db8:abcd:ffff::1": "2001:db8:abcd::",
		"::ffff:198.51.100.9":   "198.51.100.0",
		"fe80::1%eth0":          "fe80::",
		"::1":                   "::",
		"not an address":        "",
		"":                      "",
		"203.0.113.7:8080":      "",
		// IPv6 addresses that carry an IPv4 one: that address, shortened.
		"2002:cb00:7107::1":        "203.0.113.0",
		"2002:cb00:7107:1:2:3:4:5": "203.0.113.0",
		"64:ff9b::203.0.113.7":     "203.0.113.0",
		"64:ff9b::cb00:7107":       "203.0.113.0",
		"::ffff:203.0.113.7":       "203.0.113.0",
		"64:ff9b:1::203.0.113.7":   "64:ff9b:1::",
		"2003:cb00:7107::1":        "2003:cb00:7107::",
	} {
		if got := AnonymizeIP(in); got != want {
			t.Errorf("AnonymizeIP(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestRedactURL(t *testing.T) {
	names := []string{"email", "token", "a b"}
	for _, c := range []struct{ in, want string }{
		{"https://x.io/p?email=ada%40x.io&ref=m", "https://x.io/p?email=redacted&ref=m"},
		{"https://x.io/p?EMAIL=ada&Token=t1&ref=m&token=t2", "https://x.io/p?EMAIL=redacted&Token=redacted&ref=m&token=redacted"},
		{"https://x.io/p?e%6Dail=ada&ref=%zz", "https://x.io/p?e%6Dail=redacted&ref=%zz"},
		{"https://x.io/p?a+b=1&a%20b=2&ab=3", "https://x.io/p?a+b=redacted&a%20b=redacted&ab=3"},
		{"https://x.io/p?email&email=&x==y", "https://x.io/p?email&email=redacted&x==y"},
		{"https://x.io/p?ref=m#access_token=secret", "https://x.io/p?ref=m"},
		{"https://x.io/p#frag?email=x", "https://x.io/p"},
		{"https://x.io/p?&&ref=m&", "https://x.io/p?&&ref=m&"},
		{"https://x.io/p", "https://x.io/p"},
		// The forms a name may take: ;-separated, a list's brackets, surrounding spaces.
		{"https://x.io/p?ref=m;email=ada;x=1", "https://x.io/p?ref=m;email=redacted;x=1"},
		{"https://x.io/p?email[]=ada&email[0]=bob&email%5B%5D=c", "https://x.io/p?email[]=redacted&email[0]=redacted&email%5B%5D=redacted"},
		{"https://x.io/p?%20email=ada&email+=bob&+Email+=c", "https://x.io/p?%20email=redacted&email+=redacted&+Email+=redacted"},
		{"https://x.io/p?emails=ada&[email]=b&email[=c", "https://x.io/p?emails=ada&[email]=b&email[=redacted"},
		// What other parsers may read as the name: after a second "?", with a NUL, a dot or
		// an underscore after it (PHP's email_), a byte-order mark before it.
		{"https://x.io/p?a=1?email=x", "https://x.io/p?a=1?email=redacted"},
		{"https://x.io/p??email=x", "https://x.io/p??email=redacted"},
		{"https://x.io/p?email%00=x&email%2E=y&email_=z&email.=w", "https://x.io/p?email%00=redacted&email%2E=redacted&email_=redacted&email.=redacted"},
		{"https://x.io/p?%EF%BB%BFemail=x&\ufeffemail=y", "https://x.io/p?%EF%BB%BFemail=redacted&\ufeffemail=redacted"},
		{"https://x.io/p?email[a][b]=x&%09email%0A=y&e_mail=z&emai=w", "https://x.io/p?email[a][b]=redacted&%09email%0A=redacted&e_mail=z&emai=w"},
		{"https://x.io/p?a;b&email=x;", "https://x.io/p?a;b&email=redacted;"},
	} {
		if got := RedactURL(c.in, names); got != c.want {
			t.Errorf("RedactURL(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	if got := RedactURL("https://x.io/p?email=a#f", nil); got != "https://x.io/p?email=a" {
		t.Errorf("no names: %q", got)
	}
}

// What minimisation adds to an event: go test -run '^$' -bench Minimise ./internal/tracking
func BenchmarkMinimiseAnonymizeIP(b *testing.B) {
	for b.Loop() {
		_ = AnonymizeIP("203.0.113.7")
		_ = AnonymizeIP("2001:db8:1:2::7")
	}
}

func BenchmarkMinimiseRedactURL(b *testing.B) {
	const url = "https://shop.example/products/17?ref=newsletter&utm_source=mail&email=ada%40x.io#token=x"
	names := []string{"ref", "utm_source", "email"}
	for b.Loop() {
		_ = RedactURL(url, names)
	}
}
