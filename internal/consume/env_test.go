package consume

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/eventq/eventq/internal/delivery"
	"github.com/eventq/eventq/internal/eventqueue/queuetest"
	"github.com/eventq/eventq/internal/eventstore"

	"gorm.io/gorm"

	"github.com/eventq/eventq/internal/clock"
	"github.com/eventq/eventq/internal/eventqueue"
	"github.com/eventq/eventq/internal/features"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/internal/tracking"
	"github.com/eventq/eventq/models"
)

// consumeEnv is a Service and the Ingestor that fills its queues, on a fresh database and a
// redis-server of their own.
type consumeEnv struct {
	DB      *gorm.DB
	Redis   *testenv.Redis
	Queue   *eventqueue.Store
	Flags   *features.Flags
	Clock   *clock.Fake
	Ingest  *tracking.Ingestor
	Consume *Service
}

func startConsume(t *testing.T) *consumeEnv {
	t.Helper()
	db, _ := testenv.DB(t)
	r := testenv.StartRedis(t)
	e := &consumeEnv{DB: db, Redis: r, Queue: eventqueue.New(r.Client()), Flags: features.New(db, clock.Real{}), Clock: clock.NewFake(time.Now())}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	e.Ingest = tracking.NewIngestor(db, e.Flags, e.Queue, e.Clock, log, nil)
	t.Cleanup(e.Ingest.Close)
	t.Cleanup(e.Queue.Close)
	e.Consume = &Service{DB: db, Events: e.Ingest.Events(), Queue: e.Queue, Queueing: e.Flags, Held: e.Ingest.Delivery(), Clock: e.Clock}
	return e
}

// trimFront reads count events from the front and trims them with the read's offset, recording
// the trim as the api does.
func (e *consumeEnv) trimFront(t *testing.T, log *TrimLog, tenant uint64, count int) {
	t.Helper()
	ctx := context.Background()
	page, err := queuetest.ReadPage(ctx, e.Queue, tenant, count)
	if err != nil {
		t.Fatal(err)
	}
	off := page.Offset
	page.Release()
	before := e.Consume.Trims
	e.Consume.Trims = log
	defer func() { e.Consume.Trims = before }()
	if _, _, err := e.Consume.Trim(ctx, tenant, int64(count), off); err != nil {
		t.Fatal(err)
	}
}

func (e *consumeEnv) QueueLen(t *testing.T, tenant uint64) int64 {
	t.Helper()
	n, err := e.Queue.Len(context.Background(), tenant)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func (e *consumeEnv) queueIDs(t *testing.T, tenant uint64) []string {
	t.Helper()
	raw, err := queuetest.Read(context.Background(), e.Queue, tenant)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, len(raw))
	for i, r := range raw {
		var ev models.QueueEvent
		if err := json.Unmarshal([]byte(r), &ev); err != nil {
			t.Fatal(err)
		}
		ids[i] = ev.ID
	}
	return ids
}

func (e *consumeEnv) mustIngest(t *testing.T, tenant uint64, n int) []string {
	t.Helper()
	in := make([]tracking.Input, n)
	for i := range in {
		in[i] = tracking.Input{Type: "page_view", SessionID: "s", URL: "https://shop.example/a", EventSequence: int64(i)}
	}
	ids, err := e.Ingest.Ingest(context.Background(), tenant, in, tracking.Client{})
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

func (e *consumeEnv) pending(t *testing.T) int64 {
	t.Helper()
	n, err := eventstore.New(e.DB).Count(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func (e *consumeEnv) mustRequeue(t *testing.T) int {
	t.Helper()
	n, err := e.Ingest.Delivery().Requeue(context.Background(), delivery.RequeueMinAge)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func waitPending(t *testing.T, e *consumeEnv, n int64) {
	t.Helper()
	testenv.Eventually(t, 5*time.Second, fmt.Sprintf("%d events are pending", n), func() bool { return e.pending(t) == n })
}
