package tracking

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/eventq/eventq/internal/apperr"
)

// CheckHostnames refuses events whose page is not on one of the site's allowed hostnames or a
// subdomain of one (every event at fault named, 422), when the site has a list.
func (s Site) CheckHostnames(events []Input) error {
	if len(s.AllowedHostnames) == 0 {
		return nil
	}
	var errs apperr.FieldErrors
	for i := range events {
		u := events[i].parsed
		if u == nil {
			u, _ = url.Parse(events[i].URL) // validated
		}
		if !hostAllowed(u.Hostname(), s.AllowedHostnames) {
			field := fmt.Sprintf("events.%d.url", i)
			errs.Add(field, fmt.Sprintf("The %s field must be a page of an allowed hostname.", field))
		}
	}
	return errs.Err()
}

// hostAllowed reports whether host is one of allowed (kept normalised: lower case, no
// trailing dot) or a subdomain of one.
func hostAllowed(host string, allowed []string) bool {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	for _, a := range allowed {
		if host == a || strings.HasSuffix(host, "."+a) {
			return true
		}
	}
	return false
}
