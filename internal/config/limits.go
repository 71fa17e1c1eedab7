package config

import (
	"fmt"
	"github.com/dustin/go-humanize"
	"strconv"
	"strings"
	"time"
)

// Rate is a request budget: N requests per Period. The zero value means no limit ("off").
type Rate struct {
	N      int
	Period time.Duration
}

// Off reports whether the rate limits nothing.
func (r Rate) Off() bool { return r.N == 0 }

// String is the rate in the variables' format: "100/s", "6000/m" or "off".
func (r Rate) String() string {
	switch {
	case r.Off():
		return "off"
	case r.Period == time.Minute:
		return fmt.Sprintf("%d/m", r.N)
	}
	return fmt.Sprintf("%d/s", r.N)
}

// ParseRate reads "N/s", "N/m" (N a positive integer) or "off".
func ParseRate(s string) (Rate, error) {
	if strings.EqualFold(s, "off") {
		return Rate{}, nil
	}
	num, unit, ok := strings.Cut(s, "/")
	n, err := strconv.Atoi(num)
	if !ok || err != nil || n < 1 {
		return Rate{}, fmt.Errorf("%q is not N/s, N/m or off", s)
	}
	switch unit {
	case "s":
		return Rate{N: n, Period: time.Second}, nil
	case "m":
		return Rate{N: n, Period: time.Minute}, nil
	}
	return Rate{}, fmt.Errorf("%q is not N/s, N/m or off", s)
}

// Limits bounds what one client or tenant may cost the others.
type Limits struct {
	// Track is the budget of one site key on POST /api/track (RATE_LIMIT_TRACK). Default 1000/s.
	Track Rate
	// TrackIP is the budget of one client address on POST /api/track (RATE_LIMIT_TRACK_IP).
	// Default 100/s.
	TrackIP Rate
	// Platform is the budget of one token on /api/platform/* (RATE_LIMIT_PLATFORM).
	// Default 6000/m.
	Platform Rate
	// QueueMaxLength is the most events one tenant's queue holds (EVENTQUEUE_MAX_LENGTH);
	// events beyond it are held back in the database. Default 1,000,000.
	QueueMaxLength int64
	// QueueMaxDeliveries is how many times one event may be leased before it goes to its
	// tenant's dead letters (EVENTQUEUE_MAX_DELIVERIES). Default 10.
	QueueMaxDeliveries int64
	// QueueMaxDeadLetters is the most dead letters one tenant keeps, the oldest dropped first
	// (EVENTQUEUE_MAX_DEAD_LETTERS). Default 10,000.
	QueueMaxDeadLetters int64
	// DeadLetterRetention is how long a dead letter is kept (DEAD_LETTER_RETENTION: a Go
	// duration or Nd, at least a second). Default 14 days.
	DeadLetterRetention time.Duration
	// IngestSpoolMax is the most tracked events kept in Redis while the database cannot be
	// reached (INGEST_SPOOL_MAX); past it tracking answers 503. Default 1,000,000.
	IngestSpoolMax int64
	// IngestSpoolTenantMax is the most spooled events of one tenant (INGEST_SPOOL_TENANT_MAX):
	// past it that tenant's tracking answers 503, and no other's. Default 100,000.
	IngestSpoolTenantMax int64
	// IngestSpoolMaxBytes is the most bytes the spool's entries hold in Redis
	// (INGEST_SPOOL_MAX_BYTES: a size such as 1GiB or 512MB). Default 1 GiB.
	IngestSpoolMaxBytes int64
	// QueuePageMaxBytes is the most bytes of events' JSON one queue page or lease answer holds
	// (QUEUE_PAGE_MAX_BYTES: a size such as 8MiB, or bytes); at least one event is always
	// answered. Default 8 MiB.
	QueuePageMaxBytes int64
	// Return is the budget of one client address on GET /checkout/return
	// (RATE_LIMIT_RETURN). Default 10/s.
	Return Rate
	// AuthFailures is the budget of failed token authentications of one client address
	// (RATE_LIMIT_AUTH_FAILURES); past it, requests with a token are refused before any
	// database lookup. Default 20/m.
	AuthFailures Rate
}

func loadLimits(get func(name, def string) string) (Limits, error) {
	var l Limits
	for _, r := range []struct {
		name, def string
		into      *Rate
	}{
		{"RATE_LIMIT_TRACK", "1000/s", &l.Track},
		{"RATE_LIMIT_TRACK_IP", "100/s", &l.TrackIP},
		{"RATE_LIMIT_PLATFORM", "6000/m", &l.Platform},
		{"RATE_LIMIT_RETURN", "10/s", &l.Return},
		{"RATE_LIMIT_AUTH_FAILURES", "20/m", &l.AuthFailures},
	} {
		rate, err := ParseRate(get(r.name, r.def))
		if err != nil {
			return Limits{}, fmt.Errorf("config: %s: %v", r.name, err)
		}
		*r.into = rate
	}
	for _, c := range []struct {
		name, def string
		into      *int64
	}{
		{"EVENTQUEUE_MAX_LENGTH", "1000000", &l.QueueMaxLength},
		{"EVENTQUEUE_MAX_DELIVERIES", "10", &l.QueueMaxDeliveries},
		{"EVENTQUEUE_MAX_DEAD_LETTERS", "10000", &l.QueueMaxDeadLetters},
		{"INGEST_SPOOL_MAX", "1000000", &l.IngestSpoolMax},
		{"INGEST_SPOOL_TENANT_MAX", "100000", &l.IngestSpoolTenantMax},
	} {
		raw := get(c.name, c.def)
		n, err := strconv.ParseInt(raw, 10, 64)
		if err != nil || n < 1 {
			return Limits{}, fmt.Errorf("config: %s: %q is not a positive integer", c.name, raw)
		}
		*c.into = n
	}
	raw := get("INGEST_SPOOL_MAX_BYTES", "1GiB")
	size, err := humanize.ParseBytes(raw)
	if err != nil || size < 1<<10 || size > 1<<50 {
		return Limits{}, fmt.Errorf("config: INGEST_SPOOL_MAX_BYTES: %q is not a size from 1KiB (e.g. 1GiB or 512MB)", raw)
	}
	l.IngestSpoolMaxBytes = int64(size)
	raw = get("QUEUE_PAGE_MAX_BYTES", "8MiB")
	size, err = humanize.ParseBytes(raw)
	if err != nil || size < 1 || size > 1<<40 {
		return Limits{}, fmt.Errorf("config: QUEUE_PAGE_MAX_BYTES: %q is not a size of at least 1 byte (e.g. 8MiB)", raw)
	}
	l.QueuePageMaxBytes = int64(size)
	raw = get("DEAD_LETTER_RETENTION", "14d")
	if l.DeadLetterRetention, err = parseDays(raw); err != nil || l.DeadLetterRetention < time.Second {
		return Limits{}, fmt.Errorf("config: DEAD_LETTER_RETENTION: %q is not a duration of at least 1s (e.g. 14d or 72h)", raw)
	}
	return l, nil
}
