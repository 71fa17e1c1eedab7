package eventstore_test

import (
	"context"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/eventq/eventq/internal/eventstore"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/models"
)

// row is an event of tenant in session, as ingestion builds it.
func row(tenant uint64, session string, seq int64, at time.Time) models.TrackedEvent {
	return models.TrackedEvent{ID: uuid.Must(uuid.NewV7()).String(), TenantID: tenant, Type: "page_view", SessionID: session,
		URL: "https://shop.example/a", PageHostname: "shop.example", PagePath: "/a", UserAgent: "ua", IPAddress: "127.0.0.1",
		EventSequence: seq, CreatedAt: at}
}

// A store of more rows than one statement carries (several INSERTs on SQLite) is one
// transaction: a row refused in a later statement takes the rows of the earlier ones with it,
// and the same rows without it are stored whole, each exactly once, read back as written.
func TestAStoreOfManyStatementsIsAllOrNothing(t *testing.T) {
	db, _ := testenv.DB(t)
	store := eventstore.New(db)
	t.Cleanup(store.Close)
	testenv.RefuseSession(t, db, "poison")
	tenant := testenv.MustTenant(t, db, false).ID
	now := time.Now().UTC().Truncate(time.Microsecond) // what Postgres keeps
	rows := make([]models.TrackedEvent, 2*eventstore.SQLiteInsertChunk+50)
	for i := range rows {
		rows[i] = row(tenant, "s", int64(i), now)
	}
	rows[len(rows)-10].SessionID = "poison" // in the last statement
	if err := store.Insert(context.Background(), rows, nil); err == nil {
		t.Fatal("store with a refused row succeeded")
	}
	var n int64
	testenv.Must(t, db.Model(&models.TrackedEvent{}).Where("tenant_id = ?", tenant).Count(&n).Error)
	if n != 0 {
		t.Fatalf("%d rows stored by a refused store, want 0", n)
	}
	rows[len(rows)-10].SessionID = "s"
	if err := store.Insert(context.Background(), rows, nil); err != nil {
		t.Fatal(err)
	}
	var got []models.TrackedEvent
	testenv.Must(t, db.Where("tenant_id = ?", tenant).Order("event_sequence").Find(&got).Error)
	if len(got) != len(rows) {
		t.Fatalf("%d rows stored, want %d", len(got), len(rows))
	}
	for i := range got {
		got[i].CreatedAt = got[i].CreatedAt.UTC()
		if !reflect.DeepEqual(got[i], rows[i]) {
			t.Fatalf("row %d read back as %+v, want %+v", i, got[i], rows[i])
		}
	}
}

// Every kind of value a row holds is stored as written: an audience member and none, both
// flags either way, text beyond ASCII, extreme sequence numbers, and a time with nanoseconds
// (Postgres keeps microseconds, truncated; SQLite keeps the nanoseconds). On Postgres this is
// the binary COPY's own encoding.
func TestEveryKindOfValueIsStoredAsWritten(t *testing.T) {
	db, _ := testenv.DB(t)
	store := eventstore.New(db)
	t.Cleanup(store.Close)
	tenant := testenv.MustTenant(t, db, false).ID
	at := time.Date(2026, 11, 26, 1, 2, 3, 999_999_999, time.UTC)
	want := at
	if testenv.OnPostgres() {
		want = at.Truncate(time.Microsecond)
	}
	member := "member-ü-😀"
	var rows []models.TrackedEvent
	for i, seq := range []int64{0, -1, math.MaxInt64, math.MinInt64} {
		r := row(tenant, "sé\tss\\ion,\"x\"", seq, at)
		r.UserAgent, r.IPAddress = "ua «x»", "::1"
		r.URL = "https://shop.example/ä?q=1&r=%00"
		if i%2 == 0 {
			r.AudienceMemberID = &member
		}
		r.Queued, r.QueuePending = i&1 == 1, i&2 == 2
		rows = append(rows, r)
	}
	testenv.Must(t, store.Insert(context.Background(), rows, nil))
	var got []models.TrackedEvent
	testenv.Must(t, db.Where("tenant_id = ?", tenant).Find(&got).Error)
	if len(got) != len(rows) {
		t.Fatalf("%d rows stored, want %d", len(got), len(rows))
	}
	byID := map[string]models.TrackedEvent{}
	for _, g := range got {
		g.CreatedAt = g.CreatedAt.UTC()
		byID[g.ID] = g
	}
	for _, r := range rows {
		r.CreatedAt = want
		if g := byID[r.ID]; !reflect.DeepEqual(g, r) {
			t.Errorf("row read back as\n%+v\nwant\n%+v", g, r)
		}
	}
}

// The pending batches' INSERT carries its values as literals: each is stored as written, a
// quote in one included, and the times to the microsecond.
func TestThePendingBatchInsertStoresItsLiteralsAsWritten(t *testing.T) {
	db, _ := testenv.DB(t)
	at := time.Date(2026, 11, 26, 1, 2, 3, 456_789_000, time.UTC)
	want := []models.PendingBatch{
		{ID: "it's", TenantID: 1<<62 + 5, EventIDs: "a,'b',c''", FirstAt: at, LastAt: at.Add(time.Second), CreatedAt: at},
		{ID: uuid.Must(uuid.NewV7()).String(), TenantID: 7, EventIDs: "x", FirstAt: at, LastAt: at, CreatedAt: at.Add(-time.Hour)},
	}
	testenv.Must(t, db.Exec(eventstore.PendingBatchInsert(want)).Error)
	var got []models.PendingBatch
	testenv.Must(t, db.Order("created_at DESC").Find(&got).Error)
	if len(got) != len(want) {
		t.Fatalf("%d batches stored, want %d", len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.ID != w.ID || g.TenantID != w.TenantID || g.EventIDs != w.EventIDs ||
			!g.FirstAt.Equal(w.FirstAt) || !g.LastAt.Equal(w.LastAt) || !g.CreatedAt.Equal(w.CreatedAt) {
			t.Fatalf("batch %d read back as %+v, want %+v", i, g, w)
		}
	}
}
