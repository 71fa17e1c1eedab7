package retention_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"gorm.io/gorm"

	"github.com/eventq/eventq/internal/clock"
	"github.com/eventq/eventq/internal/database"
	"github.com/eventq/eventq/internal/eventstore"
	"github.com/eventq/eventq/internal/metrics"
	"github.com/eventq/eventq/internal/retention"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/models"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const keep = 3 * 24 * time.Hour

// store inserts n events of tenant created at at (n ids from seq on), in one statement.
func store(t testing.TB, db *gorm.DB, tenant uint64, at time.Time, seq, n int) []string {
	t.Helper()
	rows := make([]models.TrackedEvent, n)
	ids := make([]string, n)
	for i := range rows {
		ids[i] = fmt.Sprintf("01a20000-0000-7000-8000-%012d", seq+i)
		rows[i] = models.TrackedEvent{ID: ids[i], TenantID: tenant, Type: "page_view", SessionID: "s",
			URL: "https://a.example/", PageHostname: "a.example", PagePath: "/", UserAgent: "ua",
			IPAddress: "203.0.113.7", EventSequence: int64(seq + i), CreatedAt: at.UTC()}
	}
	testenv.Must(t, db.CreateInBatches(&rows, 500).Error)
	return ids
}

// inserter stores today's events of a tenant one by one, as ingestion would, until stopped.
type inserter struct {
	inserted, failed atomic.Int64
	stop             func()
}

func startInserting(db *gorm.DB, tenant uint64) *inserter {
	ins := &inserter{}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for seq := 1; ; seq++ {
			select {
			case <-done:
				return
			default:
			}
			ev := models.TrackedEvent{ID: fmt.Sprintf("01a20000-0000-7000-9000-%012d", seq), TenantID: tenant, Type: "page_view",
				SessionID: "s", URL: "https://a.example/", PageHostname: "a.example", PagePath: "/", UserAgent: "ua",
				IPAddress: "203.0.113.7", CreatedAt: time.Now().UTC()}
			if err := db.Create(&ev).Error; err != nil {
				ins.failed.Add(1)
			} else {
				ins.inserted.Add(1)
			}
		}
	}()
	ins.stop = func() { close(done); wg.Wait() }
	return ins
}

// storedIDs lists every stored event's id, sorted.
func storedIDs(t testing.TB, db *gorm.DB) []string {
	t.Helper()
	var ids []string
	testenv.Must(t, db.Model(&models.TrackedEvent{}).Order("id").Pluck("id", &ids).Error)
	return ids
}

// A prune as of a time deletes exactly the events created before the start of the oldest day
// kept, of every tenant, and nothing after it; a dry run before only counts; a second prune
// deletes nothing. On Postgres the old days go as whole partitions, including one made for a
// day that has no events, and rows of an old day without a partition (in the default one)
// are deleted too.
func TestPruneDeletesExactlyTheDaysBeforeTheCutoff(t *testing.T) {
	db, _ := testenv.DB(t)
	ctx := context.Background()
	a, b := testenv.MustTenant(t, db, true).ID, testenv.MustTenant(t, db, false).ID
	asOf := time.Now().UTC()
	cutoff := database.Day(asOf.Add(-keep))
	if _, err := database.EnsurePartitions(ctx, db, cutoff.AddDate(0, 0, -6), cutoff); err != nil {
		t.Fatal(err)
	}
	var gone, kept []string
	gone = append(gone, store(t, db, a, cutoff.AddDate(0, 0, -20), 0, 4)...) // no partition: the default one
	gone = append(gone, store(t, db, a, cutoff.AddDate(0, 0, -5), 100, 30)...)
	gone = append(gone, store(t, db, b, cutoff.AddDate(0, 0, -2).Add(5*time.Hour), 200, 20)...)
	gone = append(gone, store(t, db, b, cutoff.Add(-time.Microsecond), 300, 3)...)
	kept = append(kept, store(t, db, a, cutoff, 400, 5)...)
	kept = append(kept, store(t, db, b, cutoff.Add(time.Microsecond), 500, 2)...)
	kept = append(kept, store(t, db, a, asOf, 600, 7)...)
	slices.Sort(kept)

	mx := metrics.New()
	p := &retention.Pruner{DB: db, Events: eventstore.New(db), Keep: keep, Clock: clock.Real{}, Metrics: mx}
	dry, err := p.Prune(ctx, asOf, true)
	testenv.Must(t, err)
	if !dry.Cutoff.Equal(cutoff) || dry.Deleted != int64(len(gone)) {
		t.Errorf("dry run = %+v, want cutoff %s and %d to delete", dry, cutoff, len(gone))
	}
	if n := len(storedIDs(t, db)); n != len(gone)+len(kept) {
		t.Fatalf("the dry run deleted: %d events left, want %d", n, len(gone)+len(kept))
	}

	res, err := p.Prune(ctx, asOf, false)
	testenv.Must(t, err)
	if !res.Cutoff.Equal(cutoff) || res.Deleted != int64(len(gone)) {
		t.Errorf("prune = %+v, want cutoff %s and %d deleted", res, cutoff, len(gone))
	}
	if got := storedIDs(t, db); !slices.Equal(got, kept) {
		t.Errorf("stored after the prune %v, want %v", got, kept)
	}
	if v := testutil.ToFloat64(mx.EventsPruned); v != float64(len(gone)) {
		t.Errorf("eventq_events_pruned_total = %v, want %d", v, len(gone))
	}
	if database.IsPostgres(db) {
		parts, err := database.Partitions(ctx, db)
		testenv.Must(t, err)
		if len(parts) == 0 || !parts[0].Day.Equal(cutoff) {
			t.Errorf("oldest partition %v, want the cutoff's day %s", parts, cutoff)
		}
		if v := testutil.ToFloat64(mx.PartitionsDropped); v != 6 {
			t.Errorf("eventq_event_partitions_dropped_total = %v, want 6", v)
		}
	}

	again, err := p.Prune(ctx, asOf, false)
	if err != nil || again.Deleted != 0 || again.PartitionsDropped != 0 {
		t.Errorf("second prune = %+v, %v; want nothing deleted", again, err)
	}
	if got := storedIDs(t, db); !slices.Equal(got, kept) {
		t.Errorf("stored after the second prune %v, want %v", got, kept)
	}
}

// With retention off, Prune refuses and deletes nothing.
func TestPruneWithRetentionOffRefuses(t *testing.T) {
	db, _ := testenv.DB(t)
	tenant := testenv.MustTenant(t, db, false).ID
	store(t, db, tenant, time.Now().AddDate(-1, 0, 0), 0, 3)
	p := &retention.Pruner{DB: db, Events: eventstore.New(db), Clock: clock.Real{}}
	if _, err := p.Prune(context.Background(), time.Now(), false); !errors.Is(err, retention.ErrOff) {
		t.Fatalf("Prune with retention off = %v, want ErrOff", err)
	}
	if n := len(storedIDs(t, db)); n != 3 {
		t.Errorf("%d events left, want 3", n)
	}
}

// On SQLite the pages of the deleted rows go back to the file system: the file shrinks and no
// free page is left; more rows than one transaction deletes are all deleted.
func TestPruneGivesTheSpaceBackOnSQLite(t *testing.T) {
	db, _ := testenv.DB(t)
	if database.IsPostgres(db) {
		t.Skip("SQLite's incremental vacuum")
	}
	tenant := testenv.MustTenant(t, db, false).ID
	old := time.Now().AddDate(0, 0, -10)
	n := 4000 // several of SQLite's delete steps
	store(t, db, tenant, old, 0, n)
	store(t, db, tenant, time.Now(), n, 10)
	pages := func(pragma string) int64 {
		var v int64
		testenv.Must(t, db.Raw("PRAGMA "+pragma).Scan(&v).Error)
		return v
	}
	before := pages("page_count")
	p := &retention.Pruner{DB: db, Events: eventstore.New(db), Keep: keep, Clock: clock.Real{}}
	res, err := p.Prune(context.Background(), time.Now(), false)
	testenv.Must(t, err)
	if res.Deleted != int64(n) {
		t.Errorf("deleted %d, want %d", res.Deleted, n)
	}
	if after := pages("page_count"); after >= before/2 {
		t.Errorf("%d pages after deleting nearly every row, %d before: the space was not given back", after, before)
	}
	if free := pages("freelist_count"); free != 0 {
		t.Errorf("%d free pages left", free)
	}
	if left := len(storedIDs(t, db)); left != 10 {
		t.Errorf("%d events left, want 10", left)
	}
}

// Ingestion goes on while a prune drops partitions: inserts of today's events keep succeeding
// while the prune waits for a lock held by a long reader, since its DDL gives up after
// DDLLockTimeout instead of queueing every insert behind it; once the reader is done the prune
// goes through. Without the lock timeout the inserts would wait for the reader, and none
// would succeed while it holds its lock.
func TestIngestionGoesOnWhileAPruneWaitsForALock(t *testing.T) {
	db, url := testenv.DB(t)
	if !database.IsPostgres(db) {
		t.Skip("partition DDL is Postgres's")
	}
	ctx := context.Background()
	tenant := testenv.MustTenant(t, db, false).ID
	asOf := time.Now().UTC()
	cutoff := database.Day(asOf.Add(-keep))
	_, err := database.EnsurePartitions(ctx, db, cutoff.AddDate(0, 0, -2), cutoff)
	testenv.Must(t, err)
	store(t, db, tenant, cutoff.AddDate(0, 0, -1), 0, 50)

	// A reader in a long transaction holds a lock on the table, as a long export would.
	reader, err := database.Open(testenv.Unguarded(url))
	testenv.Must(t, err)
	defer database.Close(reader)
	tx := reader.Begin()
	var n int64
	testenv.Must(t, tx.Raw("SELECT count(*) FROM tracked_events").Scan(&n).Error)

	ins := startInserting(db, tenant)
	p := &retention.Pruner{DB: db, Events: eventstore.New(db), Keep: keep, Clock: clock.Real{}}
	_, err = p.Prune(ctx, asOf, false)
	whileHeld := ins.inserted.Load()
	if err == nil {
		t.Fatal("the prune went through while a reader held the table")
	}
	testenv.Must(t, tx.Rollback().Error)
	res, err := p.Prune(ctx, asOf, false)
	ins.stop()
	testenv.Must(t, err)
	if res.Deleted != 50 {
		t.Errorf("deleted %d once the reader was done, want 50", res.Deleted)
	}
	if whileHeld < 5 || ins.failed.Load() != 0 {
		t.Errorf("%d inserts succeeded while the prune waited for the reader and %d failed; want several and none", whileHeld, ins.failed.Load())
	}
}

// Events stored while a prune deletes thousands of old ones (in several transactions on SQLite,
// whole partitions on Postgres) are all stored: no insert fails, and none is deleted.
func TestIngestionDuringAPruneLosesNothing(t *testing.T) {
	db, _ := testenv.DB(t)
	ctx := context.Background()
	tenant := testenv.MustTenant(t, db, false).ID
	now := time.Now().UTC()
	_, err := database.EnsurePartitions(ctx, db, now.AddDate(0, 0, -12), now)
	testenv.Must(t, err)
	old := 4500
	for i := 0; i < old; i += 1000 {
		store(t, db, tenant, now.AddDate(0, 0, -10-(i/1000)%3), i, min(1000, old-i))
	}

	ins := startInserting(db, tenant)
	testenv.Eventually(t, 10*time.Second, "inserts are under way", func() bool { return ins.inserted.Load() > 0 })
	p := &retention.Pruner{DB: db, Events: eventstore.New(db), Keep: keep, Clock: clock.Real{}}
	res, err := p.Prune(ctx, now, false)
	ins.stop()
	testenv.Must(t, err)
	if res.Deleted != int64(old) {
		t.Errorf("deleted %d, want %d", res.Deleted, old)
	}
	if ins.failed.Load() != 0 {
		t.Errorf("%d inserts failed during the prune", ins.failed.Load())
	}
	if n := int64(len(storedIDs(t, db))); n != ins.inserted.Load() {
		t.Errorf("%d events stored, want the %d inserted during the prune", n, ins.inserted.Load())
	}
}

// A partition left detached by a prune cut off between its detach and its drop is dropped by
// the next prune, and its events are counted then (Postgres).
func TestPruneDropsAPartitionLeftDetached(t *testing.T) {
	db, _ := testenv.DB(t)
	if !database.IsPostgres(db) {
		t.Skip("day partitions exist on Postgres only")
	}
	ctx := context.Background()
	tenant := testenv.MustTenant(t, db, false).ID
	now := time.Now().UTC()
	day := database.Day(now.AddDate(0, 0, -10))
	_, err := database.EnsurePartitions(ctx, db, day, day)
	testenv.Must(t, err)
	store(t, db, tenant, day.Add(time.Hour), 0, 7)
	name := database.PartitionName(day)
	testenv.Must(t, db.Exec("ALTER TABLE tracked_events DETACH PARTITION "+name).Error)

	p := &retention.Pruner{DB: db, Events: eventstore.New(db), Keep: keep, Clock: clock.Real{}}
	res, err := p.Prune(ctx, now, false)
	testenv.Must(t, err)
	if res.Deleted != 7 || res.PartitionsDropped != 1 {
		t.Errorf("prune = %+v, want the detached partition's 7 events and 1 partition", res)
	}
	var n int64
	testenv.Must(t, db.Raw("SELECT count(*) FROM pg_class WHERE relname = ?", name).Scan(&n).Error)
	if n != 0 {
		t.Errorf("%s still exists", name)
	}
}
