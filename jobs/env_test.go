package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"gorm.io/gorm"

	"github.com/eventq/eventq/internal/clock"
	"github.com/eventq/eventq/internal/eventqueue"
	"github.com/eventq/eventq/internal/features"
	"github.com/eventq/eventq/internal/metrics"
	"github.com/eventq/eventq/internal/payments"
	"github.com/eventq/eventq/internal/psp"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/internal/tracking"
	"github.com/eventq/eventq/models"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// env is the real worker side in-process: a Redis, a database, an asynq server running the
// registered handlers, and a fake provider.
type env struct {
	t       *testing.T
	DB      *gorm.DB
	PSP     *testenv.FakePSP
	Tasks   *asynq.Client
	Inspect *asynq.Inspector
	Queue   *eventqueue.Store
	H       *Handlers
	Metrics *metrics.Metrics
}

func startEnv(t *testing.T) *env {
	t.Helper()
	r := testenv.StartRedis(t)
	db, _ := testenv.DB(t)
	fake := testenv.StartFakePSP(t)
	rdb := r.Client()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	store := eventqueue.New(rdb)
	flags := features.New(db, clock.Real{})
	mx := metrics.New()
	ingest := tracking.NewIngestor(db, flags, store, clock.Real{}, log, mx)
	t.Cleanup(ingest.Close)
	tasks := asynq.NewClientFromRedisClient(rdb)
	queue := NewEventQueue(tasks)
	h := &Handlers{
		Ingest: ingest, Log: log,
		Payments: &payments.Service{
			DB: db, Queue: queue, Queueing: flags, Ingest: ingest, AppURL: "https://app.example", Log: log, Metrics: mx,
		},
		Reconciler: &payments.Reconciler{
			DB: db, PSP: psp.NewClient("sk_test_jobs", fake.URL), Queue: queue, Clock: clock.Real{}, Log: log, Metrics: mx,
		},
	}
	srv := asynq.NewServerFromRedisClient(rdb, asynq.Config{
		Concurrency: 8, TaskCheckInterval: 20 * time.Millisecond, RetryDelayFunc: RetryDelay,
		LogLevel: asynq.FatalLevel,
	})
	mux := asynq.NewServeMux()
	Register(mux, h)
	if err := srv.Start(mux); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	return &env{t: t, DB: db, PSP: fake, Tasks: tasks, Inspect: asynq.NewInspectorFromRedisClient(rdb), Queue: store, H: h, Metrics: mx}
}

// shop is a tenant with UseQueueEvents active, a member and a product.
type shop struct {
	Tenant  models.Tenant
	Account string
	Member  models.AudienceMember
	Product models.Product
}

var serial atomic.Int64

// MustShop creates a shop on account ("" for the platform).
func (e *env) MustShop(account string) shop {
	e.t.Helper()
	n := serial.Add(1)
	s := shop{Tenant: models.Tenant{Name: "Shop", SiteKey: fmt.Sprintf("site_jobs_%d_%d", time.Now().UnixNano(), n)}, Account: account}
	if account != "" {
		s.Tenant.PSPAccountID = &account
	}
	must(e.t, e.DB.Create(&s.Tenant).Error)
	s.Member = models.AudienceMember{TenantID: s.Tenant.ID, Email: fmt.Sprintf("m%d@example.com", n)}
	must(e.t, e.DB.Create(&s.Member).Error)
	s.Product = models.Product{TenantID: s.Tenant.ID, Name: "Course", Amount: 1999, Currency: "usd"}
	must(e.t, e.DB.Create(&s.Product).Error)
	must(e.t, features.New(e.DB, clock.Real{}).Set(context.Background(), features.UseQueueEvents, s.Tenant.ID, true))
	return s
}

// PaidSession stores a session of s at the fake provider, pays it and records its
// checkout.session.completed event there (as if its delivery were lost). It returns the
// session and the event.
func (e *env) PaidSession(s shop) (cs psp.SessionObject, eventID string, payload []byte) {
	e.t.Helper()
	cs = e.PSP.AddSession(s.Account, psp.SessionObject{
		AmountTotal: s.Product.Amount, Currency: s.Product.Currency, Mode: "payment", PaymentStatus: "unpaid", Status: "open",
		Metadata: map[string]string{
			"tenant_id": models.FormatID(s.Tenant.ID), "audience_member_id": models.FormatID(s.Member.ID),
			"product_id": models.FormatID(s.Product.ID),
		},
	})
	eventID, payload = e.PSP.Complete(cs.ID)
	cs, _, _ = e.PSP.Session(cs.ID)
	return cs, eventID, payload
}

// Deliver enqueues payload exactly as the webhook does for a verified event. It reports
// whether this call queued it (false: already queued).
func (e *env) Deliver(payload []byte) bool {
	e.t.Helper()
	var ev struct{ ID, Type string }
	must(e.t, json.Unmarshal(payload, &ev))
	task, err := NewEventTask(ev.ID, ev.Type, payload)
	must(e.t, err)
	_, err = e.Tasks.Enqueue(task)
	if errors.Is(err, asynq.ErrTaskIDConflict) {
		return false
	}
	must(e.t, err)
	return true
}

// WaitDone waits until the task of event id has completed.
func (e *env) WaitDone(id string) {
	e.t.Helper()
	testenv.Eventually(e.t, 20*time.Second, "task "+id+" completes", func() bool {
		info, err := e.Inspect.GetTaskInfo("default", id)
		return err == nil && info.State == asynq.TaskStateCompleted
	})
}

// Count counts rows of model matching query.
func (e *env) Count(model any, query string, args ...any) int64 {
	e.t.Helper()
	var n int64
	must(e.t, e.DB.Model(model).Where(query, args...).Count(&n).Error)
	return n
}

// QueuedTypes returns the types of the events in tenant's queue, front first.
func (e *env) QueuedTypes(tenantID uint64) []string {
	e.t.Helper()
	raw, err := e.Queue.Read(context.Background(), tenantID)
	must(e.t, err)
	types := make([]string, len(raw))
	for i, r := range raw {
		var ev models.QueueEvent
		must(e.t, json.Unmarshal([]byte(r), &ev))
		types[i] = ev.Type
	}
	return types
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// testenvEventually waits up to 20 s for cond.
func testenvEventually(t *testing.T, cond func() bool) {
	t.Helper()
	testenv.Eventually(t, 20*time.Second, "the queue is idle", cond)
}
