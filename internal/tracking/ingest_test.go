package tracking

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/eventq/eventq/internal/clock"
	"github.com/eventq/eventq/internal/eventqueue"
	"github.com/eventq/eventq/internal/features"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/models"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// ingestEnv is an Ingestor on a fresh database and a redis-server of its own.
type ingestEnv struct {
	DB     *gorm.DB
	Redis  *testenv.Redis
	Queue  *eventqueue.Store
	Flags  *features.Flags
	Clock  *clock.Fake
	Ingest *Ingestor
}

func startIngest(t *testing.T) *ingestEnv {
	t.Helper()
	db, _ := testenv.DB(t)
	r := testenv.StartRedis(t)
	e := &ingestEnv{DB: db, Redis: r, Queue: eventqueue.New(r.Client()), Flags: features.New(db), Clock: clock.NewFake(time.Now())}
	e.Ingest = NewIngestor(db, e.Flags, e.Queue, e.Clock, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	t.Cleanup(e.Ingest.Close)
	return e
}

// MustTenant creates a tenant with UseQueueEvents active.
func (e *ingestEnv) MustTenant(t *testing.T) uint64 {
	t.Helper()
	tn := models.Tenant{Name: "Shop", SiteKey: fmt.Sprintf("site_%d", time.Now().UnixNano())}
	if err := e.DB.Create(&tn).Error; err != nil {
		t.Fatal(err)
	}
	if err := e.Flags.Set(context.Background(), features.UseQueueEvents, tn.ID, true); err != nil {
		t.Fatal(err)
	}
	return tn.ID
}

// Rows counts the stored events of tenant.
func (e *ingestEnv) Rows(t *testing.T, tenant uint64) int64 {
	t.Helper()
	var n int64
	if err := e.DB.Model(&models.TrackedEvent{}).Where("tenant_id = ?", tenant).Count(&n).Error; err != nil {
		t.Fatal(err)
	}
	return n
}

// QueueLen is the length of tenant's queue.
func (e *ingestEnv) QueueLen(t *testing.T, tenant uint64) int64 {
	t.Helper()
	n, err := e.Queue.Len(context.Background(), tenant)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func input(session string, seq int64) Input {
	return Input{Type: "page_view", SessionID: session, URL: "https://shop.example/a", EventSequence: seq}
}

// refuseSession makes the database refuse any row whose session_id is session, the way a
// constraint or an encoding error would.
func refuseSession(t *testing.T, db *gorm.DB, session string) {
	t.Helper()
	stmts := []string{fmt.Sprintf(`CREATE TRIGGER refuse BEFORE INSERT ON tracked_events
		WHEN NEW.session_id = '%s' BEGIN SELECT RAISE(ABORT, 'refused by test'); END`, session)}
	if testenv.Backend() == "postgres" {
		stmts = []string{
			fmt.Sprintf(`CREATE FUNCTION refuse() RETURNS trigger AS $$ BEGIN
				IF NEW.session_id = '%s' THEN RAISE EXCEPTION 'refused by test'; END IF;
				RETURN NEW; END $$ LANGUAGE plpgsql`, session),
			`CREATE TRIGGER refuse BEFORE INSERT ON tracked_events FOR EACH ROW EXECUTE FUNCTION refuse()`,
		}
	}
	for _, s := range stmts {
		if err := db.Exec(s).Error; err != nil {
			t.Fatal(err)
		}
	}
}

// A batch holding one request the database refuses fails that request alone: the others are
// committed and queued.
func TestABatchFailsOnlyTheRequestTheDatabaseRefuses(t *testing.T) {
	e := startIngest(t)
	refuseSession(t, e.DB, "poison")
	tenants := []uint64{e.MustTenant(t), e.MustTenant(t), e.MustTenant(t)}

	t.Run("in one batch", func(t *testing.T) {
		now := e.Clock.Now().UTC()
		var batch []*commitRequest
		for i, session := range []string{"good-1", "poison", "good-2"} {
			row := newRow(fmt.Sprintf("0000000%d-0000-7000-8000-000000000000", i), tenants[i], input(session, 1), Client{}, now)
			row.QueuePending = true
			batch = append(batch, &commitRequest{tenant: tenants[i], rows: []models.TrackedEvent{row}, queued: true})
		}
		e.Ingest.commitBatch(batch, 3)
		if batch[0].err != nil || batch[2].err != nil || batch[1].err == nil {
			t.Fatalf("errors %v, %v, %v: want only the second", batch[0].err, batch[1].err, batch[2].err)
		}
		for i, want := range []int64{1, 0, 1} {
			if rows, n := e.Rows(t, tenants[i]), e.QueueLen(t, tenants[i]); rows != want || n != want {
				t.Fatalf("tenant %d: %d rows, %d queued, want %d", i, rows, n, want)
			}
		}
	})
	t.Run("among 40 concurrent requests", func(t *testing.T) {
		victim, attacker := e.MustTenant(t), e.MustTenant(t)
		var wg sync.WaitGroup
		errs := make(chan error, 41)
		for i := 0; i < 40; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				_, err := e.Ingest.Ingest(context.Background(), victim, []Input{input("v", int64(i))}, Client{})
				errs <- err
			}(i)
		}
		_, poisonErr := e.Ingest.Ingest(context.Background(), attacker, []Input{input("poison", 1)}, Client{})
		wg.Wait()
		close(errs)
		failed := 0
		for err := range errs {
			if err != nil {
				failed++
			}
		}
		if failed != 0 || poisonErr == nil {
			t.Fatalf("%d of 40 valid requests failed; poisoned request error %v", failed, poisonErr)
		}
		if rows, n := e.Rows(t, victim), e.QueueLen(t, victim); rows != 40 || n != 40 {
			t.Fatalf("victim: %d rows, %d queued, want 40", rows, n)
		}
	})
}
