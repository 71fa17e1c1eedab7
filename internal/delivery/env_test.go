package delivery

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"github.com/eventq/eventq/internal/clock"
	"github.com/eventq/eventq/internal/eventqueue"
	"github.com/eventq/eventq/internal/eventqueue/queuetest"
	"github.com/eventq/eventq/internal/eventstore"
	"github.com/eventq/eventq/internal/features"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/models"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// Input is an accepted event as these tests write it: ingestion's validation is not theirs.
type Input struct {
	Type, SessionID, URL string
	EventSequence        int64
	AudienceMemberID     *string
}

func input(session string, seq int64) Input {
	return Input{Type: "page_view", SessionID: session, URL: "https://shop.example/a", EventSequence: seq}
}

// Client is the request's user agent and address.
type Client struct{ UserAgent, IPAddress string }

// newRow is the row ingestion builds of an accepted event.
func newRow(id string, tenant uint64, in Input, c Client, now time.Time) models.TrackedEvent {
	return models.TrackedEvent{ID: id, TenantID: tenant, Type: in.Type, SessionID: in.SessionID, URL: in.URL,
		AudienceMemberID: in.AudienceMemberID, PageHostname: "shop.example", PagePath: "/a", UserAgent: c.UserAgent,
		IPAddress: c.IPAddress, EventSequence: in.EventSequence, CreatedAt: now}
}

// ingester is the Service with ingestion's hand-over in front: rows made of inputs,
// queued as the tenant's flag says.
type ingester struct {
	*Service
	clock clock.Clock
}

// Ingest delivers inputs of tenant as ingestion does, and returns their ids.
func (in ingester) Ingest(ctx context.Context, tenant uint64, inputs []Input, c Client) ([]string, error) {
	queued, flagErr := in.queueing.Queues(ctx, tenant)
	now := in.clock.Now().UTC()
	rows := make([]models.TrackedEvent, len(inputs))
	ids := make([]string, len(inputs))
	for i, ev := range inputs {
		rows[i] = newRow(uuid.Must(uuid.NewV7()).String(), tenant, ev, c, now)
		rows[i].Queued = queued
		ids[i] = rows[i].ID
	}
	if err := in.Deliver(ctx, tenant, rows, queued, flagErr); err != nil {
		return nil, err
	}
	return ids, nil
}

// Delivery is the service itself.
func (in ingester) Delivery() *Service { return in.Service }

// ingestEnv is a Service on a fresh database and a redis-server of its own.
type ingestEnv struct {
	DB     *gorm.DB
	Redis  *testenv.Redis
	Queue  *eventqueue.Store
	Flags  *features.Flags
	Clock  *clock.Fake
	Ingest ingester
}

func startIngest(t *testing.T) *ingestEnv {
	t.Helper()
	db, _ := testenv.DB(t)
	r := testenv.StartRedis(t)
	return newIngestEnv(t, db, r, r.Client())
}

// newIngestEnv is a Service on db and on r, which it reaches through rdb (a client of r's
// with hooks, or r.Client()).
func newIngestEnv(t *testing.T, db *gorm.DB, r *testenv.Redis, rdb *redis.Client) *ingestEnv {
	t.Helper()
	e := &ingestEnv{DB: db, Redis: r, Queue: eventqueue.New(rdb), Flags: features.New(db, clock.Real{}), Clock: clock.NewFake(time.Now())}
	e.Ingest = e.newIngester(t, Options{})
	return e
}

// newIngester is another Service with the options given, e's database, queue, flags and clock
// where they are not.
func (e *ingestEnv) newIngester(t *testing.T, o Options) ingester {
	events := eventstore.New(e.DB)
	o.DB, o.Events, o.Queueing, o.Clock = e.DB, events, e.Flags, e.Clock
	if o.Queue == nil {
		o.Queue = e.Queue
	}
	if o.Log == nil {
		o.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	d := New(o)
	t.Cleanup(func() { d.Close(); events.Close() })
	return ingester{d, e.Clock}
}

// Rows counts the stored events of tenant.
func (e *ingestEnv) Rows(t *testing.T, tenant uint64) int64 {
	t.Helper()
	var n int64
	testenv.Must(t, e.DB.Model(&models.TrackedEvent{}).Where("tenant_id = ?", tenant).Count(&n).Error)
	return n
}

// QueueLen is the length of tenant's queue.
func (e *ingestEnv) QueueLen(t *testing.T, tenant uint64) int64 {
	t.Helper()
	n, err := e.Queue.Len(context.Background(), tenant)
	testenv.Must(t, err)
	return n
}

// pendingRow stores one event of tenant marked pending, as a request's commit does.
func (e *ingestEnv) pendingRow(t *testing.T, tenant uint64, session string) models.TrackedEvent {
	t.Helper()
	id := fmt.Sprintf("%08x-0000-7000-8000-%012x", time.Now().UnixNano()&0xffffffff, time.Now().UnixNano()&0xffffffffffff)
	row := newRow(id, tenant, input(session, 1), Client{}, e.Clock.Now().UTC())
	row.QueuePending = true
	testenv.Must(t, e.DB.Create(&row).Error)
	return row
}

func (e *ingestEnv) pending(t *testing.T) int64 {
	t.Helper()
	n, err := e.Ingest.Events().Count(context.Background(), 0)
	testenv.Must(t, err)
	return n
}

func (e *ingestEnv) mustRequeue(t *testing.T) int {
	t.Helper()
	n, err := e.Ingest.Requeue(context.Background(), RequeueMinAge)
	testenv.Must(t, err)
	return n
}

// queueIDs reads the ids in tenant's queue, front first.
func (e *ingestEnv) queueIDs(t *testing.T, tenant uint64) []string {
	t.Helper()
	raw, err := queuetest.Read(context.Background(), e.Queue, tenant)
	testenv.Must(t, err)
	ids := make([]string, len(raw))
	for i, r := range raw {
		var ev models.QueueEvent
		testenv.Must(t, json.Unmarshal([]byte(r), &ev))
		ids[i] = ev.ID
	}
	return ids
}

func (e *ingestEnv) mustIngest(t *testing.T, tenant uint64, n int) []string {
	t.Helper()
	in := make([]Input, n)
	for i := range in {
		in[i] = input("s", int64(i))
	}
	ids, err := e.Ingest.Ingest(context.Background(), tenant, in, Client{})
	testenv.Must(t, err)
	return ids
}

func waitPending(t *testing.T, e *ingestEnv, n int64) {
	t.Helper()
	testenv.Eventually(t, 5*time.Second, fmt.Sprintf("%d events are pending", n), func() bool { return e.pending(t) == n })
}
