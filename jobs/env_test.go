package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/eventq/eventq/internal/eventqueue/queuetest"

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
	queue := NewProviderEvents(tasks)
	h := &Handlers{
		Delivery: ingest.Delivery(), Log: log,
		Payments: &payments.Service{
			DB: db, Events: ingest.Events(), Queue: queue, Queueing: flags, Ingest: ingest.Delivery(), Clock: clock.Real{}, AppURL: "https://app.example", Log: log, Metrics: mx,
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
	return &env{DB: db, PSP: fake, Tasks: tasks, Inspect: asynq.NewInspectorFromRedisClient(rdb), Queue: store, H: h, Metrics: mx}
}

// shop is a tenant with UseQueueEvents active, a member and a product.
type shop = testenv.Shop

// MustShop creates a shop on account ("" for the platform).
func (e *env) MustShop(t *testing.T, account string) shop {
	t.Helper()
	return testenv.MustShop(t, e.DB, account, true)
}

// PaidSession stores a session of s at the fake provider, pays it and records its
// checkout.session.completed event there (as if its delivery were lost). It returns the
// session and the event.
func (e *env) PaidSession(t *testing.T, s shop) (cs psp.SessionObject, eventID string, payload []byte) {
	t.Helper()
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
func (e *env) Deliver(t *testing.T, payload []byte) bool {
	t.Helper()
	var ev struct{ ID, Type string }
	testenv.Must(t, json.Unmarshal(payload, &ev))
	task, err := NewEventTask(ev.ID, ev.Type, payload)
	testenv.Must(t, err)
	_, err = e.Tasks.Enqueue(task)
	if errors.Is(err, asynq.ErrTaskIDConflict) {
		return false
	}
	testenv.Must(t, err)
	return true
}

// WaitDone waits until the task of event id has completed.
func (e *env) WaitDone(t *testing.T, id string) {
	t.Helper()
	testenv.Eventually(t, 20*time.Second, "task "+id+" completes", func() bool {
		info, err := e.Inspect.GetTaskInfo("default", id)
		return err == nil && info.State == asynq.TaskStateCompleted
	})
}

// Count counts rows of model matching query.
func (e *env) Count(t *testing.T, model any, query string, args ...any) int64 {
	t.Helper()
	var n int64
	testenv.Must(t, e.DB.Model(model).Where(query, args...).Count(&n).Error)
	return n
}

// QueuedTypes returns the types of the events in tenant's queue, front first.
func (e *env) QueuedTypes(t *testing.T, tenantID uint64) []string {
	t.Helper()
	raw, err := queuetest.Read(context.Background(), e.Queue, tenantID)
	testenv.Must(t, err)
	types := make([]string, len(raw))
	for i, r := range raw {
		var ev models.QueueEvent
		testenv.Must(t, json.Unmarshal([]byte(r), &ev))
		types[i] = ev.Type
	}
	return types
}

// testenvEventually waits up to 20 s for cond.
func testenvEventually(t *testing.T, cond func() bool) {
	t.Helper()
	testenv.Eventually(t, 20*time.Second, "the queue is idle", cond)
}
