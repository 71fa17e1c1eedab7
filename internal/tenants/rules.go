package tenants

import (
	"net/netip"
	"strings"

	"github.com/eventq/eventq/internal/apperr"
	"github.com/eventq/eventq/internal/validate"
	"github.com/eventq/eventq/models"
)

// Limits of the contract's rules.
const (
	maxName         = 255
	maxAccount      = 255
	maxHostnames    = 100
	maxHostname     = 253
	maxRedactParams = 50
	maxParamName    = 255
)

// apply validates the keys of in onto t: all of them on create (name required), the present
// ones on update.
func apply(errs *apperr.FieldErrors, t *models.Tenant, in map[string]any, create bool) {
	if create || validate.Present(in, "name") {
		if name, ok := validate.RequiredString(errs, "name", in["name"], maxName); ok {
			t.Name = name
		}
	}
	if validate.Present(in, "psp_account_id") {
		t.PSPAccountID = nil
		if acct := validate.NullableString(errs, "psp_account_id", in["psp_account_id"], maxAccount); acct != nil {
			if strings.HasPrefix(*acct, "acct_") {
				t.PSPAccountID = acct
			} else {
				validate.Add(errs, "psp_account_id", "must start with one of the following: acct_.")
			}
		}
	}
	if validate.Present(in, "allowed_hostnames") {
		t.AllowedHostnames = models.StringList{}
		if in["allowed_hostnames"] != nil {
			if list, ok := validate.StringList(errs, "allowed_hostnames", in["allowed_hostnames"], maxHostnames, maxHostname, hostnameRule); ok {
				t.AllowedHostnames = dedupe(list, NormalizeHostname)
			}
		}
	}
	if validate.Present(in, "redact_query_params") {
		t.RedactQueryParams = models.StringList{}
		if in["redact_query_params"] != nil {
			if list, ok := validate.StringList(errs, "redact_query_params", in["redact_query_params"], maxRedactParams, maxParamName, nil); ok {
				t.RedactQueryParams = dedupe(list, func(s string) string { return s })
			}
		}
	}
}

// NormalizeHostname is the form a hostname is kept and compared in: lower case, without a
// leading "*." (subdomains are always allowed) or a trailing dot.
func NormalizeHostname(h string) string {
	h = strings.ToLower(strings.TrimSuffix(h, "."))
	return strings.TrimPrefix(h, "*.")
}

// hostnameRule accepts a DNS name (letters, digits and hyphens in labels of 1 to 63), an IP
// address, or either after "*.".
func hostnameRule(h string) string {
	h = NormalizeHostname(h)
	if _, err := netip.ParseAddr(strings.Trim(h, "[]")); err == nil {
		return ""
	}
	if h == "" || len(h) > maxHostname {
		return "format is invalid."
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return "format is invalid."
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return "format is invalid."
			}
		}
	}
	return ""
}

func dedupe(list []string, norm func(string) string) models.StringList {
	out := make(models.StringList, 0, len(list))
	seen := map[string]bool{}
	for _, s := range list {
		s = norm(s)
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}
