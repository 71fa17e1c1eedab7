package eventstore_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/eventq/eventq/internal/eventstore"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/models"
)

// createdAt finds an event's created_at by its id, whether or not the time in the id (a UUID
// v7) is near it, and only for the tenant's own events.
func TestCreatedAtFindsTheEventByID(t *testing.T) {
	db, _ := testenv.DB(t)
	store := eventstore.New(db)
	tenant, other := testenv.MustTenant(t, db, false).ID, testenv.MustTenant(t, db, false).ID
	near := markedRows(t, db, tenant, time.Now(), 1)[0]
	far := markedRows(t, db, tenant, time.Now().Add(-40*24*time.Hour), 1)[0] // stored long before the time in its id
	for _, id := range []string{near, far} {
		var row models.TrackedEvent
		testenv.Must(t, db.Take(&row, "id = ?", id).Error)
		if at, ok := store.CreatedAt(tenant, id); !ok || !at.Equal(row.CreatedAt) {
			t.Errorf("createdAt(%s) = %v, %v; want %v", id, at, ok, row.CreatedAt)
		}
		if _, ok := store.CreatedAt(other, id); ok {
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
	db, _ := testenv.DB(t)
	store := eventstore.New(db)
	a, hold, b := testenv.MustTenant(t, db, true).ID, testenv.MustTenant(t, db, true).ID, testenv.MustTenant(t, db, true).ID
	base := time.Now().Add(-time.Hour)
	cutoff := base.Add(time.Minute)
	// b's events are older than a's: the order across tenants is the ids', within one its own.
	ofA := markedRows(t, db, a, base.Add(10*time.Second), 4)
	markedRows(t, db, hold, base, 50)
	ofB := markedRows(t, db, b, base.Add(5*time.Second), 3)
	markedRows(t, db, b, cutoff.Add(time.Second), 2) // after the cutoff
	read := func(limit int) []string {
		t.Helper()
		rows, err := store.Pool(context.Background()).Oldest(cutoff, 0, tenants(hold), limit)
		testenv.Must(t, err)
		return idsOf(rows)
	}
	if got, want := read(100), append(slices.Clone(ofA), ofB...); !slices.Equal(got, want) {
		t.Errorf("every tenant but the held one: %v, want %v", got, want)
	}
	if got, want := read(6), append(slices.Clone(ofA), ofB[:2]...); !slices.Equal(got, want) {
		t.Errorf("a limit of 6 across tenants: %v, want %v", got, want)
	}
	if rows, err := store.Pool(context.Background()).Oldest(cutoff, hold, nil, 3); err != nil || len(rows) != 3 {
		t.Errorf("the held tenant's own drain read %d events, %v; want its 3 oldest", len(rows), err)
	}
}

// A tenant the pass over every tenant skips is asked about before any of its events is read:
// on Postgres none of them is locked while the pass's transaction lasts, so its own drain can
// take them all.
func TestOldestLeavesASkippedTenantsEventsUnlocked(t *testing.T) {
	db, _ := testenv.DB(t)
	store := eventstore.New(db)
	if testenv.Backend() == "sqlite" {
		t.Skip("row locks: Postgres only (SQLite has one writer)")
	}
	a, hold := testenv.MustTenant(t, db, true).ID, testenv.MustTenant(t, db, true).ID
	markedRows(t, db, a, time.Now().Add(-time.Hour), 3)
	markedRows(t, db, hold, time.Now().Add(-2*time.Hour), 5)
	var asked []uint64
	testenv.Must(t, store.Locking(context.Background(), func(tx eventstore.Tx) error {
		rows, err := tx.Oldest(time.Now(), 0, func(t uint64) bool { asked = append(asked, t); return t == hold }, 100)
		if err != nil || len(rows) != 3 {
			t.Fatalf("the pass read %d events, %v; want the other tenant's 3", len(rows), err)
		}
		var ids []string
		err = db.Raw("SELECT id FROM tracked_events WHERE tenant_id = ? AND queue_pending FOR UPDATE NOWAIT", hold).Scan(&ids).Error
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
	db, _ := testenv.DB(b)
	store := eventstore.New(db)
	other := testenv.MustTenant(b, db, true).ID
	markedRows(b, db, other, time.Now().Add(-time.Hour), 100)
	pass := func(b *testing.B, skip func(uint64) bool) {
		for b.Loop() {
			if _, err := store.Pool(context.Background()).Oldest(time.Now(), 0, skip, 500); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("no backlog", func(b *testing.B) { pass(b, nil) })
	backlog := testenv.MustTenant(b, db, true).ID
	markedRows(b, db, backlog, time.Now().Add(-2*time.Hour), 100_000)
	b.Run("held backlog of 100k", func(b *testing.B) { pass(b, tenants(backlog)) })
}
