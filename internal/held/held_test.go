package held_test

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/google/uuid"

	"github.com/eventq/eventq/internal/clock"
	"github.com/eventq/eventq/internal/database"
	"github.com/eventq/eventq/internal/eventqueue"
	"github.com/eventq/eventq/internal/features"
	"github.com/eventq/eventq/internal/held"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/internal/tracking"
	"github.com/eventq/eventq/models"
)

// heldEnv is a held.Store and the Ingestor that fills its queues, on a fresh database and a
// redis-server of their own.
type heldEnv struct {
	DB     *gorm.DB
	Queue  *eventqueue.Store
	Clock  *clock.Fake
	Ingest *tracking.Ingestor
	Held   *held.Store
}

func startHeld(t testing.TB) *heldEnv {
	t.Helper()
	db, _ := testenv.DB(t)
	r := testenv.StartRedis(t)
	e := &heldEnv{DB: db, Queue: eventqueue.New(r.Client()), Clock: clock.NewFake(time.Now())}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	e.Ingest = tracking.NewIngestor(db, features.New(db, clock.Real{}), e.Queue, e.Clock, log, nil)
	t.Cleanup(e.Ingest.Close)
	t.Cleanup(e.Queue.Close)
	e.Held = &held.Store{DB: db, Queue: e.Queue}
	return e
}

func (e *heldEnv) mustIngest(t *testing.T, tenant uint64, n int) []string {
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

func (e *heldEnv) mustBack(t *testing.T, tenant uint64) int64 {
	t.Helper()
	n, err := e.Held.Back(context.Background(), tenant)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// Back counts the held events of a full queue exactly, however its readings are paged or
// interleaved with the settling of a batch. (The queue's statistics, which report the count,
// are tested in internal/consume.)
func TestBackIsExact(t *testing.T) {
	t.Run("counts marked events across pages, many committed at the same time", func(t *testing.T) {
		e := startHeld(t)
		e.Queue.MaxLength = 30
		e.Held.SetMarkPage(7) // the 20 held events (one request: one created_at) in pages of 7, 7 and 6
		full := testenv.MustTenant(t, e.DB, true).ID
		e.mustIngest(t, full, 50)
		testenv.Eventually(t, 10*time.Second, "the held events are marked on their rows", func() bool {
			var marked int64
			testenv.Must(t, e.DB.Model(&models.TrackedEvent{}).Where("queue_pending").Count(&marked).Error)
			return marked == 20
		})
		if n := e.mustBack(t, full); n != 20 {
			t.Fatalf("a full queue, counted in pages of 7: %d held back, want 20", n)
		}
	})
	t.Run("a batch settled between the two readings is counted once", func(t *testing.T) {
		e := startHeld(t)
		e.Queue.MaxLength = 30
		// Back reads the tenant's pending batch, then, while the hook waits, the batch is
		// settled (deleted, its 20 held events marked), then Back reads the marks. A batch
		// settled before Back starts does not test this: another tenant tries again.
		for attempt := 1; ; attempt++ {
			full := testenv.MustTenant(t, e.DB, true).ID
			e.mustIngest(t, full, 50)
			caught := false
			e.Held.SetBetweenReads(func() {
				var batches int64
				testenv.Must(t, e.DB.Model(&models.PendingBatch{}).Where("tenant_id = ?", full).Count(&batches).Error)
				if caught = batches > 0; !caught {
					return
				}
				testenv.Eventually(t, 10*time.Second, "the batch is settled", func() bool {
					var marked int64
					testenv.Must(t, e.DB.Model(&models.PendingBatch{}).Where("tenant_id = ?", full).Count(&batches).Error)
					testenv.Must(t, e.DB.Model(&models.TrackedEvent{}).Where("queue_pending AND tenant_id = ?", full).Count(&marked).Error)
					return batches == 0 && marked == 20
				})
			})
			n := e.mustBack(t, full)
			if !caught {
				if attempt == 20 {
					t.Fatal("20 batches were settled before Back read them")
				}
				continue
			}
			if n != 20 {
				t.Fatalf("a full queue whose batch was settled while Back ran: %d held back, want 20", n)
			}
			return
		}
	})
}

// createdAt finds an event's created_at by its id, whether or not the time in the id (a UUID
// v7) is near it, and only for the tenant's own events.
func TestCreatedAtFindsTheEventByID(t *testing.T) {
	e := startHeld(t)
	ctx := context.Background()
	tenant, other := testenv.MustTenant(t, e.DB, false).ID, testenv.MustTenant(t, e.DB, false).ID
	near := e.mustIngest(t, tenant, 1)[0]
	e.Clock.Advance(-40 * 24 * time.Hour) // stored long before the time in its id
	far := e.mustIngest(t, tenant, 1)[0]
	for _, id := range []string{near, far} {
		var row models.TrackedEvent
		testenv.Must(t, e.DB.Take(&row, "id = ?", id).Error)
		if at, ok := e.Held.CreatedAt(ctx, tenant, id); !ok || !at.Equal(row.CreatedAt) {
			t.Errorf("createdAt(%s) = %v, %v; want %v", id, at, ok, row.CreatedAt)
		}
		if _, ok := e.Held.CreatedAt(ctx, other, id); ok {
			t.Errorf("createdAt(%s) found another tenant's event", id)
		}
	}
}

// markedRows stores n events of tenant marked pending, created one millisecond apart from at.
func markedRows(t testing.TB, db *gorm.DB, tenant uint64, at time.Time, n int) []string {
	t.Helper()
	rows := make([]models.TrackedEvent, n)
	ids := make([]string, n)
	for i := range rows {
		ids[i] = uuid.Must(uuid.NewV7()).String()
		rows[i] = models.TrackedEvent{ID: ids[i], TenantID: tenant, Type: "page_view", SessionID: "s", URL: "https://a.example/",
			PageHostname: "a.example", PagePath: "/", EventSequence: int64(i), Queued: true, QueuePending: true,
			CreatedAt: at.Add(time.Duration(i) * time.Millisecond).UTC()}
	}
	testenv.Must(t, db.CreateInBatches(&rows, 500).Error)
	return ids
}

func idsOf(rows []models.TrackedEvent) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = r.ID
	}
	return out
}

// The re-pusher's pass over every tenant reads each tenant's marked events oldest first, up to
// the limit across tenants, none created after the cutoff and none of a tenant it skips
// (a held tenant, whose backlog its own drain pushes).
func TestOldestReadsEachTenantInOrderAndSkipsTheHeld(t *testing.T) {
	e := startHeld(t)
	a, hold, b := testenv.MustTenant(t, e.DB, true).ID, testenv.MustTenant(t, e.DB, true).ID, testenv.MustTenant(t, e.DB, true).ID
	base := time.Now().Add(-time.Hour)
	cutoff := base.Add(time.Minute)
	// b's events are older than a's: the order across tenants is the ids', within one its own.
	ofA := markedRows(t, e.DB, a, base.Add(10*time.Second), 4)
	markedRows(t, e.DB, hold, base, 50)
	ofB := markedRows(t, e.DB, b, base.Add(5*time.Second), 3)
	markedRows(t, e.DB, b, cutoff.Add(time.Second), 2) // after the cutoff
	read := func(limit int) []string {
		t.Helper()
		rows, err := held.Oldest(e.DB, cutoff, 0, tenants(hold), limit)
		testenv.Must(t, err)
		return idsOf(rows)
	}
	if got, want := read(100), append(slices.Clone(ofA), ofB...); !slices.Equal(got, want) {
		t.Errorf("every tenant but the held one: %v, want %v", got, want)
	}
	if got, want := read(6), append(slices.Clone(ofA), ofB[:2]...); !slices.Equal(got, want) {
		t.Errorf("a limit of 6 across tenants: %v, want %v", got, want)
	}
	if rows, err := held.Oldest(e.DB, cutoff, hold, nil, 3); err != nil || len(rows) != 3 {
		t.Errorf("the held tenant's own drain read %d events, %v; want its 3 oldest", len(rows), err)
	}
}

// A tenant the pass over every tenant skips is asked about before any of its events is read:
// on Postgres none of them is locked while the pass's transaction lasts, so its own drain can
// take them all.
func TestOldestLeavesASkippedTenantsEventsUnlocked(t *testing.T) {
	e := startHeld(t)
	if !database.IsPostgres(e.DB) {
		t.Skip("row locks: Postgres only (SQLite has one writer)")
	}
	a, hold := testenv.MustTenant(t, e.DB, true).ID, testenv.MustTenant(t, e.DB, true).ID
	markedRows(t, e.DB, a, time.Now().Add(-time.Hour), 3)
	markedRows(t, e.DB, hold, time.Now().Add(-2*time.Hour), 5)
	var asked []uint64
	testenv.Must(t, e.DB.Transaction(func(tx *gorm.DB) error {
		rows, err := held.Oldest(tx, time.Now(), 0, func(t uint64) bool { asked = append(asked, t); return t == hold }, 100)
		if err != nil || len(rows) != 3 {
			t.Fatalf("the pass read %d events, %v; want the other tenant's 3", len(rows), err)
		}
		var ids []string
		err = e.DB.Raw("SELECT id FROM tracked_events WHERE tenant_id = ? AND queue_pending FOR UPDATE NOWAIT", hold).Scan(&ids).Error
		if err != nil || len(ids) != 5 {
			t.Errorf("the skipped tenant's events while the pass lasts: %d locked by another, %v; want all 5 free", len(ids), err)
		}
		return nil
	}))
	if !slices.Equal(asked, []uint64{a, hold}) {
		t.Errorf("skip asked about %v, want each tenant once, in order: %v", asked, []uint64{a, hold})
	}
}

// tenants is an Oldest skip that names ids.
func tenants(ids ...uint64) func(uint64) bool {
	return func(t uint64) bool { return slices.Contains(ids, t) }
}

// BenchmarkOldestBesideAHeldBacklog is the re-pusher's pass over every tenant while one held
// tenant has 100,000 events marked, against the same pass with none marked: the pass reads the
// other tenants' ranges of the pending index and nothing of the held tenant's (ns/op of the
// two sub-benchmarks; their ratio is the backlog's cost).
func BenchmarkOldestBesideAHeldBacklog(b *testing.B) {
	e := startHeld(b)
	other := testenv.MustTenant(b, e.DB, true).ID
	markedRows(b, e.DB, other, time.Now().Add(-time.Hour), 100)
	pass := func(b *testing.B, skip func(uint64) bool) {
		for b.Loop() {
			if _, err := held.Oldest(e.DB, time.Now(), 0, skip, 500); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("no backlog", func(b *testing.B) { pass(b, nil) })
	backlog := testenv.MustTenant(b, e.DB, true).ID
	markedRows(b, e.DB, backlog, time.Now().Add(-2*time.Hour), 100_000)
	b.Run("held backlog of 100k", func(b *testing.B) { pass(b, tenants(backlog)) })
}
