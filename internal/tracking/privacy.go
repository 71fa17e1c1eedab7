package tracking

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strings"
	"time"

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
	anonymize bool     // AnonymizeIp: addresses shortened
	redact    []string // query parameters whose values are replaced, lower case
	erased    *erased  // members erased: events naming them are stored without them
	tenantID  uint64
	// The last address minimise shortened, and what it became: one request's events share it.
	lastIP, lastShort string
	shortened         bool // lastIP and lastShort are set
}

// erased are a tenant's erased members: their ids, and the hashes of their former external
// ids (erasure.ExternalHash).
type erased struct {
	ids, hashes map[string]bool
}

// privacyOf reads tenantID's privacy settings. When the flag cannot be read the address is
// anonymised all the same: the full address is never written for a tenant that asked not to.
// When the parameters cannot be read (the database is down and this process never read
// them), nothing is redacted but the fragment.
func (in *Ingestor) privacyOf(ctx context.Context, tenantID uint64) privacy {
	anon, err := in.queueing.Anonymizes(ctx, tenantID)
	p := privacy{anonymize: anon || err != nil, tenantID: tenantID}
	p.erased, _ = in.erased.Get(ctx, tenantID, func(ctx context.Context) (*erased, error) {
		var rows []models.MemberErasure
		err := in.db.WithContext(ctx).Select("member_id", "external_hash").Where("tenant_id = ?", tenantID).Find(&rows).Error
		if err != nil {
			return nil, fmt.Errorf("tracking: erased members: %w", err)
		}
		out := &erased{ids: map[string]bool{}, hashes: map[string]bool{}}
		for _, r := range rows {
			out.ids[models.FormatID(r.MemberID)] = true
			if r.ExternalHash != "" {
				out.hashes[r.ExternalHash] = true
			}
		}
		return out, nil
	})
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
	if m := row.AudienceMemberID; m != nil && p.erased != nil && len(p.erased.ids)+len(p.erased.hashes) > 0 &&
		(p.erased.ids[*m] || p.erased.hashes[erasure.ExternalHash(p.tenantID, *m)]) {
		row.AudienceMemberID = nil
	}
}

// AnonymizeIP shortens an address: an IPv4 address's last octet zeroed (203.0.113.7 →
// 203.0.113.0), an IPv6 address cut to its first 48 bits (2001:db8:1:2::7 → 2001:db8:1::).
// Anything that does not parse as an address becomes "": it cannot be shortened, and the
// whole of it must not be kept.
func AnonymizeIP(s string) string {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return ""
	}
	a = a.WithZone("").Unmap()
	bits := 24
	if a.Is6() {
		bits = 48
	}
	p, _ := a.Prefix(bits)
	return p.Addr().String()
}

// RedactURL returns raw without its fragment and with the value of every query parameter
// named in names (lower case; matched without regard to case, the name percent-decoded)
// replaced by "redacted". Every other byte stays as sent.
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
	for i, part := range strings.Split(raw[q+1:], "&") {
		if i > 0 {
			b.WriteByte('&')
		}
		name, _, hasValue := strings.Cut(part, "=")
		if hasValue && redacted(name, names) {
			b.WriteString(name)
			b.WriteString("=redacted")
			continue
		}
		b.WriteString(part)
	}
	return b.String()
}

func redacted(name string, names []string) bool {
	if n, err := url.QueryUnescape(name); err == nil {
		name = n
	}
	name = strings.ToLower(name)
	for _, r := range names {
		if name == r {
			return true
		}
	}
	return false
}
