package tracking

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/eventq/eventq/internal/cache"
	"github.com/eventq/eventq/internal/delivery"
	"github.com/eventq/eventq/internal/erasure"

	"github.com/eventq/eventq/internal/apperr"
	"github.com/eventq/eventq/internal/breaker"
	"github.com/eventq/eventq/internal/clock"
	"github.com/eventq/eventq/internal/database"
	"github.com/eventq/eventq/internal/eventqueue"
	"github.com/eventq/eventq/internal/eventstore"
	"github.com/eventq/eventq/internal/metrics"
	"github.com/eventq/eventq/internal/validate"
	"github.com/eventq/eventq/models"
)

// ErrUnknownSiteKey is returned for a site key that names no tenant.
var ErrUnknownSiteKey = &apperr.Error{Code: apperr.Unauthorized, Message: "Unauthenticated."}

// siteKeyTTL bounds how long a site key lookup (hit or miss) is cached: a rotated key, or a
// change of the tenant's allowed hostnames, reaches every api process within a second.
const siteKeyTTL = 500 * time.Millisecond

// Client is what the server knows of the caller: its user agent and address.
type Client struct {
	UserAgent string
	IPAddress string
}

// Ingestor is ingestion's front end: it resolves site keys, minimises validated events into
// rows and hands them to delivery, which stores and queues them. It is safe for concurrent use.
type Ingestor struct {
	db       *gorm.DB
	queueing Flags
	queue    *eventqueue.Store // the tenants' erasure counts
	delivery *delivery.Service
	clock    clock.Clock
	siteKeys *cache.Fallback[string, Site]               // answers from memory while dbDown is open
	redact   *cache.Fallback[uint64, []string]           // tenants' redacted query parameters
	erased   *cache.Fallback[erasedKey, *erasure.Erased] // tenants' erased members
}

// Options are what an Ingestor is built from.
type Options struct {
	DB       *gorm.DB
	Queueing Flags
	Queue    *eventqueue.Store
	Delivery *delivery.Service
	Clock    clock.Clock
	// DatabaseDown is open while the database was found unavailable (delivery opens it): the
	// lookups answer from memory meanwhile.
	DatabaseDown *breaker.Breaker
}

// New returns an Ingestor.
func New(o Options) *Ingestor {
	down, clk := o.DatabaseDown, o.Clock
	return &Ingestor{db: o.DB, queueing: o.Queueing, queue: o.Queue, delivery: o.Delivery, clock: clk,
		siteKeys: cache.NewFallback[string, Site](siteKeyTTL, clk, database.LookupTimeout, database.ColdLookupTimeout, down, database.Unavailable),
		redact:   cache.NewFallback[uint64, []string](privacyTTL, clk, database.LookupTimeout, database.ColdLookupTimeout, down, database.Unavailable),
		erased:   cache.NewFallback[erasedKey, *erasure.Erased](privacyTTL, clk, database.LookupTimeout, database.ColdLookupTimeout, down, database.Unavailable),
	}
}

// NewIngestor returns an Ingestor on db with a delivery of its own that does not spool, for
// the tools and tests that need nothing else; m may be nil. Close closes its delivery.
func NewIngestor(db *gorm.DB, queueing Flags, queue *eventqueue.Store, clk clock.Clock, log *slog.Logger, m *metrics.Metrics) *Ingestor {
	return NewSpooling(db, queueing, queue, clk, log, m, eventqueue.SpoolLimits{})
}

// NewSpooling is NewIngestor with a spool bounded by limits.
func NewSpooling(db *gorm.DB, queueing Flags, queue *eventqueue.Store, clk clock.Clock, log *slog.Logger, m *metrics.Metrics, limits eventqueue.SpoolLimits) *Ingestor {
	down := &breaker.Breaker{Cooldown: database.DownCooldown}
	d := delivery.New(delivery.Options{DB: db, Events: eventstore.New(db), Queue: queue, Queueing: queueing, Clock: clk, Log: log,
		Metrics: m, DatabaseDown: down, Spool: limits})
	return New(Options{DB: db, Queueing: queueing, Queue: queue, Delivery: d, Clock: clk, DatabaseDown: down})
}

// Delivery is the delivery the ingestor hands its rows to.
func (in *Ingestor) Delivery() *delivery.Service { return in.delivery }

// Events is the store the ingestor's delivery writes to.
func (in *Ingestor) Events() *eventstore.Store { return in.delivery.Events() }

// Close closes the ingestor's delivery: only for an Ingestor made by NewIngestor, which owns it.
func (in *Ingestor) Close() {
	in.delivery.Close()
	in.delivery.Events().Close()
}

// Site is what public ingestion needs of the tenant a site key names.
type Site struct {
	TenantID uint64
	// AllowedHostnames, when not empty, are the page hostnames (and their subdomains) whose
	// events are accepted.
	AllowedHostnames []string
}

// SiteByKey resolves a public site key to its tenant (cached for siteKeyTTL). While the
// database is unreachable, a site key looked up before is answered as it was then.
func (in *Ingestor) SiteByKey(ctx context.Context, siteKey string) (Site, error) {
	site, err := in.siteKeys.Get(ctx, siteKey, func(ctx context.Context) (Site, error) {
		var t models.Tenant // id 0 when there is none: a miss is cached too
		err := in.db.WithContext(ctx).Select("id", "allowed_hostnames").Where("site_key = ?", siteKey).Take(&t).Error
		if err != nil && !errors.Is(err, gorm.ErrRecordNotFound) {
			return Site{}, fmt.Errorf("tracking: site key: %w", err)
		}
		return Site{TenantID: t.ID, AllowedHostnames: t.AllowedHostnames}, nil
	})
	if err == nil && site.TenantID == 0 {
		err = ErrUnknownSiteKey
	}
	return site, err
}

// Ingest minimises events into rows and delivers them (delivery.Service.Deliver): stored,
// and appended to the tenant's queue when its UseQueueEvents is active, or spooled while the
// database is down. It returns the new ids once that is done.
func (in *Ingestor) Ingest(ctx context.Context, tenantID uint64, inputs []Input, client Client) ([]string, error) {
	queued, flagErr := in.queueing.Queues(ctx, tenantID)
	priv := in.privacyOf(ctx, tenantID, namesMembers(inputs))
	now := in.clock.Now().UTC()
	rows := make([]models.TrackedEvent, len(inputs))
	ids := make([]string, len(inputs))
	for i, ev := range inputs {
		id, err := uuid.NewV7()
		if err != nil {
			return nil, fmt.Errorf("tracking: id: %w", err)
		}
		rows[i] = newRow(id.String(), tenantID, ev, client, now)
		priv.minimise(&rows[i]) // before the row is written anywhere: database, spool or queue
		rows[i].Queued = queued // not marked pending: a pending batch stands for the marks
		ids[i] = rows[i].ID
	}
	if err := in.delivery.Deliver(ctx, tenantID, rows, queued, flagErr); err != nil {
		return nil, err
	}
	return ids, nil
}

// Column sizes of the server-set fields (models.TrackedEvent): what Storable cuts them to.
const (
	maxHostnameLen  = 255
	maxIPAddressLen = 45
)

// newRow builds the row of one validated event. The server-set fields (page hostname and
// path, user agent, address) come from the URL and the request's headers, which the client
// controls too: they are made storable rather than refused.
func newRow(id string, tenantID uint64, ev Input, client Client, now time.Time) models.TrackedEvent {
	u := ev.parsed
	if u == nil {
		u, _ = url.Parse(ev.URL) // validated
	}
	path := u.EscapedPath()
	if path == "" {
		path = "/"
	}
	userAgent, ip := client.UserAgent, client.IPAddress
	if ev.UserAgent != nil {
		userAgent = *ev.UserAgent
	}
	if ev.IPAddress != nil {
		ip = *ev.IPAddress
	}
	return models.TrackedEvent{
		ID: id, TenantID: tenantID, Type: ev.Type, SessionID: ev.SessionID,
		AudienceMemberID: ev.AudienceMemberID, URL: ev.URL,
		PageHostname:  validate.Storable(u.Hostname(), maxHostnameLen),
		PagePath:      validate.Storable(path, maxURLLen),
		UserAgent:     validate.Storable(userAgent, maxUserAgentLen),
		IPAddress:     validate.Storable(ip, maxIPAddressLen),
		EventSequence: ev.EventSequence, CreatedAt: now,
	}
}
