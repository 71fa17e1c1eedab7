package database_test

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/eventq/eventq/internal/database"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/models"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// previousVersion is the last migration of the version before stored events could be pruned.
const previousVersion = "2026112302_payments_recovery"

// openEmpty opens an empty database (no migrations) for t.
func openEmpty(t *testing.T) *gorm.DB {
	t.Helper()
	db, err := database.Open(testenv.EmptyDatabaseURL(t))
	testenv.Must(t, err)
	t.Cleanup(func() { database.Close(db) })
	return db
}

// event is a stored event of tenant created at at, with its queue bookkeeping.
func event(n int, tenant uint64, at time.Time, queued, pending bool) models.TrackedEvent {
	member := fmt.Sprint(n)
	ev := models.TrackedEvent{ID: fmt.Sprintf("01a20000-0000-7000-8000-%012d", n), TenantID: tenant, Type: "page_view",
		SessionID: fmt.Sprintf("s-%d", n), URL: fmt.Sprintf("https://a.example/%d?x=1&y=<2>", n), PageHostname: "a.example",
		PagePath: fmt.Sprintf("/%d", n), UserAgent: "Mozilla/5.0", IPAddress: "203.0.113.7", EventSequence: int64(n),
		Queued: queued, QueuePending: pending, CreatedAt: at.UTC().Truncate(time.Microsecond)}
	if n%3 == 0 {
		ev.AudienceMemberID = &member
	}
	return ev
}

func allEvents(t *testing.T, db *gorm.DB) []models.TrackedEvent {
	t.Helper()
	var rows []models.TrackedEvent
	testenv.Must(t, db.Order("id").Find(&rows).Error)
	for i := range rows {
		rows[i].CreatedAt = rows[i].CreatedAt.UTC()
	}
	return rows
}

// A database made by the previous version, with events over many days (one far in the past,
// one in the future, queued, pending and neither), migrates with every row and column kept;
// on Postgres the table is then partitioned by day with a partition for every day that has
// rows and for the days ahead, and on SQLite incremental auto-vacuum is on.
func TestMigrateKeepsEveryEventOfThePreviousVersion(t *testing.T) {
	db := openEmpty(t)
	testenv.Must(t, database.MigrateTo(db, previousVersion))
	if !database.IsPostgres(db) { // as the previous version made it: without auto-vacuum
		// Read back on the same connection: the pool opened this new file with
		// auto_vacuum(incremental) in its DSN, and a connection opened after the VACUUM
		// reports the mode it was told to set, not the file's.
		var mode int
		testenv.Must(t, db.Connection(func(conn *gorm.DB) error {
			if err := conn.Exec("PRAGMA auto_vacuum = NONE").Error; err != nil {
				return err
			}
			if err := conn.Exec("VACUUM").Error; err != nil {
				return err
			}
			return conn.Raw("PRAGMA auto_vacuum").Scan(&mode).Error
		}))
		if mode != 0 {
			t.Fatalf("auto_vacuum = %d before migrating, want 0 (none), as the previous version made it", mode)
		}
	}
	now := time.Now().UTC()
	days := []int{-400, -40, -3, -2, -1, 0, 0, 1, 30}
	var want []models.TrackedEvent
	for i, d := range days {
		for j := 0; j < 3; j++ {
			n := i*10 + j + 1
			ev := event(n, uint64(1+j%2), now.AddDate(0, 0, d).Add(time.Duration(j)*time.Minute), j != 1, j == 2)
			testenv.Must(t, db.Create(&ev).Error)
		}
	}
	want = allEvents(t, db)
	if len(want) != len(days)*3 {
		t.Fatalf("%d rows before migrating, want %d", len(want), len(days)*3)
	}

	testenv.Must(t, database.Migrate(db))
	got := allEvents(t, db)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("rows changed by the migration:\n got %+v\nwant %+v", got, want)
	}
	testenv.Must(t, database.Migrate(db)) // idempotent
	if again := allEvents(t, db); !reflect.DeepEqual(again, want) {
		t.Fatal("a second migrate changed the rows")
	}

	if !database.IsPostgres(db) {
		// Asked through a pool opened on the existing file, whose DSN sets no auto_vacuum:
		// what it reports is the file's mode.
		var (
			seq        int
			name, file string
			mode       int
		)
		testenv.Must(t, db.Raw("PRAGMA database_list").Row().Scan(&seq, &name, &file))
		fresh, err := database.Open("sqlite://" + file)
		testenv.Must(t, err)
		defer database.Close(fresh)
		testenv.Must(t, fresh.Raw("PRAGMA auto_vacuum").Scan(&mode).Error)
		if mode != 2 {
			t.Errorf("auto_vacuum = %d after migrating, want 2 (incremental)", mode)
		}
		return
	}
	var kind string
	testenv.Must(t, db.Raw(`SELECT relkind FROM pg_class WHERE relname = 'tracked_events'`).Scan(&kind).Error)
	if kind != "p" {
		t.Fatalf("tracked_events has relkind %q, want p (partitioned)", kind)
	}
	parts, err := database.Partitions(context.Background(), db)
	testenv.Must(t, err)
	have := map[string]bool{}
	for _, p := range parts {
		have[p.Name] = true
	}
	for _, d := range append(days, 2, 3, 4, 5, 6, 7) {
		if name := database.PartitionName(database.Day(now.AddDate(0, 0, d))); !have[name] {
			t.Errorf("no partition %s after migrating", name)
		}
	}
	var inDefault int64
	testenv.Must(t, db.Raw("SELECT count(*) FROM "+database.DefaultPartition).Scan(&inDefault).Error)
	if inDefault != 0 {
		t.Errorf("%d rows in the default partition, want 0: every day with rows has its partition", inDefault)
	}
	var pk []string
	testenv.Must(t, db.Raw(`SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
		WHERE i.indrelid = 'tracked_events'::regclass AND i.indisprimary ORDER BY a.attname`).Scan(&pk).Error)
	if !slices.Equal(pk, []string{"created_at", "id", "tenant_id"}) {
		t.Errorf("primary key %v, want (tenant_id, id, created_at)", pk)
	}
}

// On Postgres, a row whose day has no partition is stored in the default partition, never
// refused; the partition created for its day later takes it over, and EnsurePartitions is
// idempotent.
func TestRowWithoutItsPartitionIsKeptAndMovedToItsDay(t *testing.T) {
	if !testenv.OnPostgres() {
		t.Skip("day partitions exist on Postgres only")
	}
	db, _ := testenv.DB(t)
	ctx := context.Background()
	far := time.Now().UTC().AddDate(0, 0, 90)
	ev := event(1, 1, far, true, true)
	testenv.Must(t, db.Create(&ev).Error)
	var inDefault int64
	testenv.Must(t, db.Raw("SELECT count(*) FROM "+database.DefaultPartition).Scan(&inDefault).Error)
	if inDefault != 1 {
		t.Fatalf("%d rows in the default partition, want the one without a day partition", inDefault)
	}

	n, err := database.EnsurePartitions(ctx, db, far.AddDate(0, 0, -1), far)
	testenv.Must(t, err)
	if n != 2 {
		t.Errorf("EnsurePartitions created %d partitions, want 2", n)
	}
	if n, err := database.EnsurePartitions(ctx, db, far.AddDate(0, 0, -1), far); err != nil || n != 0 {
		t.Errorf("EnsurePartitions again = %d, %v; want 0, nil", n, err)
	}
	var inDay int64
	testenv.Must(t, db.Raw("SELECT count(*) FROM "+database.PartitionName(database.Day(far))).Scan(&inDay).Error)
	testenv.Must(t, db.Raw("SELECT count(*) FROM "+database.DefaultPartition).Scan(&inDefault).Error)
	if inDay != 1 || inDefault != 0 {
		t.Errorf("%d rows in the day's partition and %d in the default one, want 1 and 0", inDay, inDefault)
	}
	if got := allEvents(t, db); len(got) != 1 || !reflect.DeepEqual(got[0], ev) {
		t.Errorf("rows %+v, want the event unchanged", got)
	}
}

// Processes creating the same partitions at once (workers starting together) all succeed and
// each partition is made once: the advisory lock serialises them, where two CREATE TABLEs of
// one name would otherwise collide.
func TestConcurrentEnsurePartitionsMakeEachOnce(t *testing.T) {
	if !testenv.OnPostgres() {
		t.Skip("day partitions exist on Postgres only")
	}
	_, url := testenv.DB(t)
	from := time.Now().UTC().AddDate(0, 0, 200)
	to := from.AddDate(0, 0, 5)
	const procs = 4
	made := make(chan int, procs)
	errs := make(chan error, procs)
	for i := 0; i < procs; i++ {
		go func() {
			db, err := database.Open(url) // a pool of its own, as another process would have
			if err != nil {
				made <- 0
				errs <- err
				return
			}
			defer database.Close(db)
			n, err := database.EnsurePartitions(context.Background(), db, from, to)
			made <- n
			errs <- err
		}()
	}
	total := 0
	for i := 0; i < procs; i++ {
		testenv.Must(t, <-errs)
	}
	for i := 0; i < procs; i++ {
		total += <-made
	}
	if total != 6 {
		t.Errorf("%d partitions made in all, want 6 (each of the 6 days once)", total)
	}
}

// DropPartition counts a day's rows in steps (countDetached) and the steps add up to the
// exact count, whatever the step size against the rows; two processes dropping the same day
// at once count it once between them.
func TestDropPartitionCountsEveryRowOnce(t *testing.T) {
	if !testenv.OnPostgres() {
		t.Skip("day partitions exist on Postgres only")
	}
	db, url := testenv.DB(t)
	ctx := context.Background()
	defer database.SetCountStep(7)()
	day := database.Day(time.Now().UTC().AddDate(0, 0, -300))
	for i, rows := range []int{0, 1, 7, 30} {
		d := day.AddDate(0, 0, i)
		if _, err := database.EnsurePartitions(ctx, db, d, d); err != nil {
			t.Fatal(err)
		}
		evs := make([]models.TrackedEvent, rows)
		for j := range evs {
			evs[j] = event(1000*i+j, uint64(1+j%3), d.Add(time.Duration(j)*time.Minute), false, false) // steps cross tenants
		}
		if rows > 0 {
			testenv.Must(t, db.Create(&evs).Error)
		}
		parts, err := database.Partitions(ctx, db)
		testenv.Must(t, err)
		name := ""
		for _, p := range parts {
			if p.Day.Equal(d) {
				name = p.Name
			}
		}
		if name == "" {
			t.Fatalf("no partition for %s in %v", d, parts)
		}
		// Two processes at once, each with a pool of its own.
		type outcome struct {
			n       int64
			dropped bool
			err     error
		}
		out := make(chan outcome, 2)
		for range 2 {
			go func() {
				other, err := database.Open(url)
				if err != nil {
					out <- outcome{err: err}
					return
				}
				defer database.Close(other)
				n, dropped, err := database.DropPartition(ctx, other, name)
				out <- outcome{n, dropped, err}
			}()
		}
		var counted int64
		drops := 0
		for range 2 {
			o := <-out
			testenv.Must(t, o.err)
			if o.dropped {
				drops++
				counted += o.n
			}
		}
		if drops != 1 || counted != int64(rows) {
			t.Errorf("a day of %d rows: dropped %d times, %d rows counted; want once, %d", rows, drops, counted, rows)
		}
		var left int64
		testenv.Must(t, db.Raw(`SELECT count(*) FROM pg_class WHERE relname = ?`, name).Scan(&left).Error)
		if left != 0 {
			t.Errorf("the table %s is still there", name)
		}
	}
}
