package delivery

import (
	"context"
	"database/sql/driver"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/eventq/eventq/internal/database"
	"github.com/eventq/eventq/internal/eventqueue"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/models"
)

// startOutageIngest is an Ingestor with the spool on, on a Postgres server of its own (which
// the test halts and resumes) and a redis-server of its own.
func startOutageIngest(t *testing.T) (*ingestEnv, *testenv.Postgres) {
	t.Helper()
	testenv.OnOneDatabase(t) // a Postgres of its own, whatever the suite's database
	pg, db, _ := testenv.DurablePostgres(t, "outage")
	r := testenv.StartRedis(t)
	e := newIngestEnv(t, db, r, r.Client())
	e.Ingest.limits.Events = 1000
	return e, pg
}

// Through a Postgres outage, tracking requests are answered at once and kept in the spool;
// the drain stores each once and queues it after the events accepted before it and before
// those accepted after it, the ones stored directly once the database was back included.
func TestIngestionSpoolsThroughAPostgresOutage(t *testing.T) {
	e, pg := startOutageIngest(t)
	ctx := context.Background()
	queued := testenv.MustTenant(t, e.DB, true).ID
	unqueued := testenv.MustTenant(t, e.DB, false).ID
	seq := int64(0)
	ingest := func(t *testing.T, tenant uint64) string {
		t.Helper()
		seq++
		start := time.Now()
		ids, err := e.Ingest.Ingest(ctx, tenant, []Input{input("s", seq)}, Client{UserAgent: "test", IPAddress: "192.0.2.1"})
		if err != nil {
			t.Fatalf("event %d: %v", seq, err)
		}
		if took := time.Since(start); took > 2*time.Second {
			t.Fatalf("event %d answered after %s", seq, took)
		}
		e.Clock.Advance(time.Millisecond) // acceptance order is created_at order
		return ids[0]
	}
	for _, tn := range []uint64{queued, unqueued} { // the flags are read once while the database answers
		if _, err := e.Flags.Queues(ctx, tn); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{ingest(t, queued)}
	pg.Halt()
	for i := 0; i < 3; i++ {
		want = append(want, ingest(t, queued))
	}
	ingest(t, unqueued)
	if n, _ := e.Queue.SpoolEvents(ctx); n != 4 {
		t.Fatalf("spool holds %d events, want 4", n)
	}
	if _, err := e.Ingest.Delivery().DrainSpool(ctx, "test"); err == nil {
		t.Fatal("the spool drained with the database down")
	}
	if err := pg.Resume(); err != nil {
		t.Fatal(err)
	}
	e.Clock.Advance(database.DownCooldown) // the Ingestor tries the database again
	// Stored directly (the database answers), held behind the spooled events.
	want = append(want, ingest(t, queued))
	if got := e.queueIDs(t, queued); !slices.Equal(got, want[:1]) {
		t.Fatalf("before the drain the queue holds %v, want only %v", got, want[:1])
	}
	n, err := e.Ingest.Delivery().DrainSpool(ctx, "test")
	if err != nil || n != 4 {
		t.Fatalf("drained %d events, %v; want 4", n, err)
	}
	if got := e.queueIDs(t, queued); !slices.Equal(got, want) {
		t.Fatalf("queue %v, want %v", got, want)
	}
	if rows := e.Rows(t, queued); rows != 5 {
		var got []models.TrackedEvent
		e.DB.Order("created_at").Find(&got)
		for _, g := range got {
			t.Logf("%s %d %v", g.ID, g.TenantID, g.CreatedAt)
		}
		t.Logf("want %v", want)
		t.Fatalf("%d rows of the queued tenant, want 5", rows)
	}
	if rows := e.Rows(t, unqueued); rows != 1 {
		t.Fatalf("%d rows of the other tenant, want 1", rows)
	}
	if n, _ := e.Queue.SpoolEvents(ctx); n != 0 {
		t.Fatalf("spool count %d after the drain", n)
	}
	var stored models.TrackedEvent
	if err := e.DB.Where("id = ?", want[1]).Take(&stored).Error; err != nil || stored.UserAgent != "test" || stored.IPAddress != "192.0.2.1" || stored.QueuePending {
		t.Fatalf("a spooled row stored as %+v, %v", stored, err)
	}

	t.Run("a drain repeated after a crash stores and queues nothing twice", func(t *testing.T) {
		// The drainer died after storing its step and before dropping it from the spool.
		entry := encodeSpoolEntry(nil, []models.TrackedEvent{stored})
		if err := e.Queue.Spool(ctx, queued, entry, 1, eventqueue.SpoolLimits{Events: 1000, TenantEvents: 1000, Bytes: 1 << 20}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.Ingest.Delivery().DrainSpool(ctx, "test"); err != nil {
			t.Fatal(err)
		}
		if rows := e.Rows(t, queued); rows != 5 {
			t.Fatalf("%d rows, want 5", rows)
		}
		if got := e.queueIDs(t, queued); !slices.Equal(got, want) {
			t.Fatalf("queue %v, want %v", got, want)
		}
	})
	t.Run("a full spool refuses", func(t *testing.T) {
		e.Ingest.limits.Events = 1
		pg.Halt()
		defer pg.Resume()
		ingest(t, queued)
		_, err := e.Ingest.Ingest(ctx, queued, []Input{input("s", 99)}, Client{})
		if err != errSpoolFull {
			t.Fatalf("err %v, want errSpoolFull", err)
		}
	})
}

// A step whose store fails while the next is stored beside it ends the drain with the error,
// the spool kept for the next drain; the drain does not wait forever for the outcome it
// already read (which wedged a worker's drain for good after Postgres went away mid-drain).
func TestADrainWhoseStoreFailsReturns(t *testing.T) {
	e, _ := startOutageIngest(t)
	ctx := context.Background()
	tenant := testenv.MustTenant(t, e.DB, false).ID
	row := func(i int, typ string) models.TrackedEvent {
		return models.TrackedEvent{ID: uuid.Must(uuid.NewV7()).String(), TenantID: tenant, Type: typ, SessionID: "s",
			URL: "https://shop.example/a", EventSequence: int64(i), CreatedAt: e.Clock.Now()}
	}
	// The first step is a whole step's worth of rows, one of which Postgres refuses (a NUL
	// byte in text, which validation would have removed); the second step is stored beside it.
	first := make([]models.TrackedEvent, spoolDrainEvents)
	for i := range first {
		first[i] = row(i, "page_view")
	}
	first[len(first)/2].Type = "page\x00view"
	second := []models.TrackedEvent{row(0, "page_view")}
	for _, rows := range [][]models.TrackedEvent{first, second} {
		testenv.Must(t, e.Queue.Spool(ctx, tenant, encodeSpoolEntry(nil, rows), len(rows), eventqueue.SpoolLimits{Events: 1 << 20, TenantEvents: 1 << 20, Bytes: 1 << 30}))
	}
	done := make(chan error, 1)
	go func() {
		_, err := e.Ingest.Delivery().DrainSpool(ctx, "test")
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("the drain succeeded with a row Postgres refuses")
		}
	case <-time.After(time.Minute):
		t.Fatal("the drain did not return within a minute of a failed store")
	}
	if n, _ := e.Queue.SpoolEvents(ctx); n != int64(len(first)+len(second)) {
		t.Fatalf("the spool holds %d events after the failed drain, want %d", n, len(first)+len(second))
	}
	if rows := e.Rows(t, tenant); rows > int64(len(second)) {
		t.Fatalf("%d rows stored by the failed drain, want at most the second step's %d", rows, len(second))
	}
}

// A spooled request reads back as the rows it was made of; a damaged one adds no row.
func TestSpoolEntriesReadBackAsWritten(t *testing.T) {
	member := "m-7"
	rows := []models.TrackedEvent{
		newRow("01a21a2f-47cf-7c1f-b40d-9ba93edb1e32", 3, Input{Type: "page_view", SessionID: "s", URL: "https://shop.example/a?b=ü", EventSequence: 9, AudienceMemberID: &member},
			Client{UserAgent: "Mozilla/5.0 \u00e9", IPAddress: "2001:db8::1"}, time.Date(2026, 11, 26, 12, 0, 0, 123456789, time.UTC)),
		newRow("01a21a2f-47f2-713d-80f6-6b2a9adea96e", 3, input("", -1), Client{}, time.Unix(0, 0).UTC()),
	}
	entry := encodeSpoolEntry(nil, rows)
	got, err := decodeSpoolEntry(nil, entry)
	if err != nil || !reflect.DeepEqual(got, rows) {
		t.Fatalf("read back %+v, %v\nwant %+v", got, err, rows)
	}
	for _, bad := range [][]byte{nil, {9}, entry[:len(entry)-1], append(slices.Clone(entry), 0)} {
		if got, err := decodeSpoolEntry(rows[:1], bad); err == nil || len(got) != 1 {
			t.Fatalf("%q: %d rows, %v", bad, len(got), err)
		}
	}
}

// A tenant's requests spooled and stored directly in turn (a commit too slow for one api
// spooled, the next request committed at once, perhaps by another api, the one after spooled
// again) reach the queue in the order they were accepted, however the spool's drain and the
// held events' interleave.
func TestSpooledAndStoredRequestsInTurnKeepTheirOrder(t *testing.T) {
	e := startIngest(t)
	e.Ingest.limits.Events = 1000
	ctx := context.Background()
	tenant := testenv.MustTenant(t, e.DB, true).ID
	var want []string
	for i := 0; i < 6; i++ {
		var cause error
		if i%2 == 0 {
			cause = driver.ErrBadConn // the database did not take this one: spooled
		}
		row := newRow(uuid.Must(uuid.NewV7()).String(), tenant, input("s", int64(i)), Client{}, e.Clock.Now().UTC())
		row.Queued = true
		if err := e.Ingest.Deliver(ctx, tenant, []models.TrackedEvent{row}, true, cause); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		want = append(want, row.ID)
		e.Clock.Advance(database.DownCooldown + time.Millisecond) // past the outage's cooldown: the next commit is tried
	}
	if got := e.queueIDs(t, tenant); len(got) != 0 {
		t.Fatalf("before the drain the queue holds %d events, want none (all wait behind the spool)", len(got))
	}
	if n, err := e.Ingest.DrainSpool(ctx, "test"); err != nil || n != 3 {
		t.Fatalf("drained %d events, %v; want 3", n, err)
	}
	if got := e.queueIDs(t, tenant); !slices.Equal(got, want) {
		t.Fatalf("queue %v,\nwant  %v", got, want)
	}
	if rows := e.Rows(t, tenant); rows != 6 {
		t.Fatalf("%d rows, want 6", rows)
	}
}
