package tracking

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"sync"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/eventq/eventq/internal/cache"

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

// Ingestor stores tracked events and feeds tenant queues. It is safe for concurrent use.
type Ingestor struct {
	db       *gorm.DB
	queueing Flags
	queue    *eventqueue.Store
	clock    clock.Clock
	log      *slog.Logger
	siteKeys *cache.Fallback[string, Site]       // opens dbDown
	redact   *cache.Fallback[uint64, []string]   // tenants' redacted query parameters
	erased   *cache.Fallback[erasedKey, *erased] // tenants' erased members
	metrics  *metrics.Metrics
	events   *eventstore.Store

	// SpoolMax is the most events the ingestion spool holds (INGEST_SPOOL_MAX): requests the
	// database cannot store go there (see spool.go). 0 turns the spool off. Set it before the
	// first Ingest.
	SpoolMax int64
	// SpoolTenantMax is the most spooled events of one tenant (INGEST_SPOOL_TENANT_MAX), and
	// SpoolMaxBytes the most bytes of spooled entries (INGEST_SPOOL_MAX_BYTES): past either a
	// request that would spool is refused (503). 0 bounds nothing. Set them before the first
	// Ingest.
	SpoolTenantMax, SpoolMaxBytes int64

	requests   chan *commitRequest
	pushed     chan settlement
	breaker    *breaker.Breaker
	dbDown     *breaker.Breaker // open while the database was found unavailable: lookups answer from memory, requests spool
	stop       chan struct{}
	closeOnce  sync.Once
	commitOnce sync.Once // starts the group-commit loops on the first commit
	wg         sync.WaitGroup
}

// NewIngestor wires an Ingestor; its group-commit goroutines start with the first commit and
// Close stops them. queueing says which tenants' events are queued; m may be nil.
func NewIngestor(db *gorm.DB, queueing Flags, queue *eventqueue.Store, clk clock.Clock, log *slog.Logger, m *metrics.Metrics) *Ingestor {
	dbDown := &breaker.Breaker{Cooldown: database.DownCooldown}
	in := &Ingestor{db: db, queueing: queueing, queue: queue, clock: clk, log: log, metrics: m,
		siteKeys: cache.NewFallback[string, Site](siteKeyTTL, clk, database.LookupTimeout, database.ColdLookupTimeout, dbDown, database.Unavailable),
		redact:   cache.NewFallback[uint64, []string](privacyTTL, clk, database.LookupTimeout, database.ColdLookupTimeout, dbDown, database.Unavailable),
		erased:   cache.NewFallback[erasedKey, *erased](privacyTTL, clk, database.LookupTimeout, database.ColdLookupTimeout, dbDown, database.Unavailable),
		breaker:  &breaker.Breaker{Cooldown: breakerCooldown}, dbDown: dbDown,
		events:   eventstore.New(db),
		requests: make(chan *commitRequest, 4096), pushed: make(chan settlement, 1024), stop: make(chan struct{})}
	in.startCommitters()
	return in
}

// Events is the store the ingestor writes to.
func (in *Ingestor) Events() *eventstore.Store { return in.events }

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

// Ingest commits events to the database and, when the tenant's UseQueueEvents is active,
// appends them to its queue in the given order. It returns the new ids once both are done
// (a commit that lands only after spoolAfter, as its pusher takes it: the append follows).
// If the append fails after the commit, the events stay pending and Requeue pushes
// them later: no committed event is lost. If the database cannot be reached (or does not
// answer within spoolAfter), the events go to the spool instead and the ids are returned
// once they are there; DrainSpool stores them later.
func (in *Ingestor) Ingest(ctx context.Context, tenantID uint64, inputs []Input, client Client) ([]string, error) {
	queued, err := in.queueing.Queues(ctx, tenantID)
	spoolNow := err != nil && in.spoolable(err) // the flags cannot be read: no commit either
	if err != nil && !spoolNow {
		return nil, err
	}
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
	if !spoolNow && in.SpoolMax > 0 && !in.dbDown.Allow(in.clock.Now()) {
		spoolNow, err = true, errCommitSlow // the database was just found down: no commit to wait for
	}
	if !spoolNow {
		err = in.commit(ctx, tenantID, rows, queued)
	}
	if err != nil && in.spoolable(err) {
		in.dbDown.Fail(in.clock.Now())
		err = in.spool(ctx, tenantID, rows, err)
	}
	if err != nil {
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
