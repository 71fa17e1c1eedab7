package tracking

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strings"
	"time"
	"unicode"

	"gorm.io/gorm"

	"github.com/eventq/eventq/internal/erasure"
	"github.com/eventq/eventq/models"
)

// Flags are the per-tenant feature flags ingestion asks about: whether events are queued
// (UseQueueEvents) and whether addresses are anonymised (AnonymizeIp). features.Flags is one.
type Flags interface {
	Queues(ctx context.Context, tenantID uint64) (bool, error)
	Anonymizes(ctx context.Context, tenantID uint64) (bool, error)
}

// privacyTTL bounds how long a tenant's redacted query parameters are cached: a change
// reaches every api process within a second.
const privacyTTL = 500 * time.Millisecond

// privacy is what a tenant asks ingestion to keep less of.
type privacy struct {
	anonymize bool            // AnonymizeIp: addresses shortened
	redact    []string        // query parameters whose values are replaced, lower case
	erased    *erasure.Erased // members erased: events naming them are stored without them
	// taken reports whether a live member has an external id now; nil: none has.
	taken    func(external string) bool
	tenantID uint64
	// The last address minimise shortened, and what it became: one request's events share it.
	lastIP, lastShort string
	shortened         bool // lastIP and lastShort are set
}

// erasedKey keys the cache of a tenant's erased members by the tenant's erasure count when it
// was read (eventqueue.Store.Erasures): a new erasure is a new key, read from the database at
// once; -1 when the count could not be read (Redis down), an entry trusted for privacyTTL.
type erasedKey struct {
	tenant uint64
	count  int64
}

// privacyOf reads tenantID's privacy settings. When the flag cannot be read the address is
// anonymised all the same: the full address is never written for a tenant that asked not to.
// When the parameters cannot be read (the database is down and this process never read
// them), nothing is redacted but the fragment. Erased members are read only for a request
// whose events name members (members true), with the tenant's erasure count: an erasure
// answered 202 anywhere is seen here before the next such event is accepted.
func (in *Ingestor) privacyOf(ctx context.Context, tenantID uint64, members bool) privacy {
	anon, err := in.queueing.Anonymizes(ctx, tenantID)
	p := privacy{anonymize: anon || err != nil, tenantID: tenantID}
	if members {
		count, err := in.queue.Erasures(ctx, tenantID)
		if err != nil {
			count = -1
		}
		p.erased, _ = in.erased.Get(ctx, erasedKey{tenantID, count}, func(ctx context.Context) (*erasure.Erased, error) {
			return erasure.LoadErased(ctx, in.db, tenantID)
		})
		p.taken = func(external string) bool { return erasure.ExternalTaken(ctx, in.db, tenantID, external) }
	}
	p.redact, _ = in.redact.Get(ctx, tenantID, func(ctx context.Context) ([]string, error) {
		var t models.Tenant
		err := in.db.WithContext(ctx).Select("id", "redact_query_params").Take(&t, tenantID).Error
		if errors.Is(err, gorm.ErrRecordNotFound) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("tracking: redacted parameters: %w", err)
		}
		out := make([]string, len(t.RedactQueryParams))
		for i, name := range t.RedactQueryParams {
			out[i] = strings.ToLower(name)
		}
		return out, nil
	})
	return p
}

// minimise applies p to a row before it is written anywhere: the address shortened, the
// URL's fragment dropped and its redacted parameters' values replaced.
func (p *privacy) minimise(row *models.TrackedEvent) {
	if p.anonymize {
		// A request's events share an address, but for those a server sends with their own.
		if !p.shortened || row.IPAddress != p.lastIP {
			p.lastIP, p.lastShort, p.shortened = row.IPAddress, AnonymizeIP(row.IPAddress), true
		}
		row.IPAddress = p.lastShort
	}
	row.URL = RedactURL(row.URL, p.redact)
	if m := row.AudienceMemberID; m != nil && p.erased.Names(*m, p.taken) {
		row.AudienceMemberID = nil
	}
}

// AnonymizeIP shortens an address: an IPv4 address's last octet zeroed (203.0.113.7 →
// 203.0.113.0), an IPv6 address cut to its first 48 bits (2001:db8:1:2::7 → 2001:db8:1::).
// An IPv6 address that carries an IPv4 one (IPv4-mapped ::ffff:0:0/96, 6to4 2002::/16, NAT64
// 64:ff9b::/96) is that IPv4 address, shortened: its first 48 bits would keep most or all of
// it. Anything that does not parse as an address becomes "": it cannot be shortened, and the
// whole of it must not be kept.
func AnonymizeIP(s string) string {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return ""
	}
	a = embeddedIPv4(a.WithZone("").Unmap())
	bits := 24
	if a.Is6() {
		bits = 48
	}
	p, _ := a.Prefix(bits)
	return p.Addr().String()
}

var (
	sixToFour = netip.MustParsePrefix("2002::/16")
	nat64     = netip.MustParsePrefix("64:ff9b::/96")
)

// embeddedIPv4 is the IPv4 address a 6to4 or NAT64 address carries, else a.
func embeddedIPv4(a netip.Addr) netip.Addr {
	b := a.As16()
	switch {
	case !a.Is6():
		return a
	case sixToFour.Contains(a):
		return netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]})
	case nat64.Contains(a):
		return netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
	}
	return a
}

// RedactURL returns raw without its fragment and with the value of every query parameter
// named in names (lower case) replaced by "redacted"; every other byte stays as sent.
//
// The rule is meant to catch a parameter whichever parser reads the URL: a browser's
// URLSearchParams, PHP's parse_str, Rack (Rails) or qs (Express). Parameters are separated by
// "&" or ";", and by any "?" after the first, which some parsers and many hand-written splits
// take as a separator. A name matches when, once percent-decoded ("+" as a space), with a
// leading byte-order mark, surrounding spaces and control characters (NUL among them) taken
// off, cut at its first "[" (the list and map forms email[], email[0], email[a], and an
// unclosed email[, which PHP reads as email_), and with trailing "." and "_" taken off (PHP
// reads email. as email_), it equals one of names without regard to case.
func RedactURL(raw string, names []string) string {
	if i := strings.IndexByte(raw, '#'); i >= 0 {
		raw = raw[:i]
	}
	q := strings.IndexByte(raw, '?')
	if q < 0 || len(names) == 0 {
		return raw
	}
	var b strings.Builder
	b.Grow(len(raw))
	b.WriteString(raw[:q+1])
	rest := raw[q+1:]
	for {
		end := strings.IndexAny(rest, "&;?")
		part := rest
		if end >= 0 {
			part = rest[:end]
		}
		name, _, hasValue := strings.Cut(part, "=")
		if hasValue && redacted(name, names) {
			b.WriteString(name)
			b.WriteString("=redacted")
		} else {
			b.WriteString(part)
		}
		if end < 0 {
			return b.String()
		}
		b.WriteByte(rest[end])
		rest = rest[end+1:]
	}
}

// redacted reports whether a parameter's name, as sent, is one of names once read as
// RedactURL says.
func redacted(name string, names []string) bool {
	name = paramName(name)
	for _, r := range names {
		if name == paramName(r) {
			return true
		}
	}
	return false
}

// paramName is a parameter's name as RedactURL compares it.
func paramName(name string) string {
	if n, err := url.QueryUnescape(name); err == nil {
		name = n
	}
	name = strings.TrimFunc(name, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) || r == '\ufeff' })
	if i := strings.IndexByte(name, '['); i > 0 {
		name = name[:i]
	}
	name = strings.TrimFunc(name, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) })
	name = strings.TrimRight(name, "._")
	return strings.ToLower(name)
}

// namesMembers reports whether any of inputs names a member.
func namesMembers(inputs []Input) bool {
	for i := range inputs {
		if inputs[i].AudienceMemberID != nil {
			return true
		}
	}
	return false
}
