package delivery

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/eventq/eventq/internal/eventqueue"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/models"
)

// appendCounter counts the append script calls per queue key (the script's first key).
type appendCounter struct {
	mu    sync.Mutex
	calls map[string]int
}

func (c *appendCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *appendCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		c.count(cmd)
		return err
	}
}
func (c *appendCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			c.count(cmd)
		}
		return err
	}
}

// count counts cmd once it has run, unless Redis did not know the script (the caller then
// sends its source: one call, not two).
func (c *appendCounter) count(cmd redis.Cmder) {
	args := cmd.Args()
	if (cmd.Name() != "evalsha" && cmd.Name() != "eval") || len(args) < 4 ||
		(cmd.Err() != nil && strings.HasPrefix(cmd.Err().Error(), "NOSCRIPT")) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if key, ok := args[3].(string); ok {
		c.calls[key]++
	}
}

func (c *appendCounter) of(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[key]
}

func TestABatchAppendsOncePerTenant(t *testing.T) {
	db, _ := testenv.DB(t)
	r := testenv.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr()})
	t.Cleanup(func() { rdb.Close() })
	counter := &appendCounter{calls: map[string]int{}}
	rdb.AddHook(counter)
	e := newIngestEnv(t, db, r, rdb)

	// Five requests of one or two events as one group commit hands them over: tenants a, b, a, a, b.
	a, b := testenv.MustTenant(t, db, true).ID, testenv.MustTenant(t, db, true).ID
	var batch []*commitRequest
	want := map[uint64][]string{}
	for i, tenant := range []uint64{a, b, a, a, b} {
		rows := e.pendingRows(t, tenant, 1+i%2)
		batch = append(batch, &commitRequest{tenant: tenant, rows: rows, queued: true})
		for _, row := range rows {
			want[tenant] = append(want[tenant], row.ID)
		}
	}
	e.Ingest.push(context.Background(), batch)

	for tenant, ids := range want {
		if n := counter.of(eventqueue.Key(tenant)); n != 1 {
			t.Errorf("tenant %d: %d append calls for its requests, want 1", tenant, n)
		}
		if got := e.queueIDs(t, tenant); !slices.Equal(got, ids) {
			t.Errorf("tenant %d: queue %v, want the requests' events in the batch's order %v", tenant, got, ids)
		}
	}
	waitPending(t, e, 0) // every appended event's mark is cleared
}

// pendingRows stores n events of tenant marked pending, as a request's commit does.
func (e *ingestEnv) pendingRows(t *testing.T, tenant uint64, n int) []models.TrackedEvent {
	t.Helper()
	rows := make([]models.TrackedEvent, n)
	for i := range rows {
		rows[i] = newRow(uuid.Must(uuid.NewV7()).String(), tenant, input("s", int64(i)), Client{}, e.Clock.Now().UTC())
		rows[i].Queued, rows[i].QueuePending = true, true
	}
	if err := e.Ingest.Events().Insert(context.Background(), rows, nil); err != nil {
		t.Fatal(err)
	}
	return rows
}

// unmarkPending clears the marks of exactly the events it is given, whatever their ids hold
// (the ids go to Postgres as one quoted array), and leaves the others pending. It runs more
// than five times, past the point where Postgres switches a cached statement to its generic
// plan.
func TestUnmarkClearsExactlyTheGivenEvents(t *testing.T) {
	e := startIngest(t)
	tenant := testenv.MustTenant(t, e.DB, true).ID
	odd := []string{`a"b`, `c\d`, `e,f`, `{g}`, `h i`, `NULL`, `j'k`, `"`, `\`, `ü,"\{`}
	now := time.Now().UTC()
	var rows []models.TrackedEvent
	for i := range 60 {
		id := uuid.NewString()
		if i < len(odd) {
			id = odd[i]
		}
		row := newRow(id, tenant, input("s", int64(i)), Client{UserAgent: "ua", IPAddress: "127.0.0.1"}, now)
		row.Queued, row.QueuePending = true, true
		rows = append(rows, row)
	}
	testenv.Must(t, e.Ingest.Events().Insert(context.Background(), rows, nil))
	cleared := map[string]bool{}
	for i := 0; i < 50; i += 7 { // eight calls of seven, the odd ids among the first two
		chunk := rows[i:min(i+7, 50)]
		testenv.Must(t, unmarkPending(e.Ingest.Events().Pool(context.Background()), appendQueued(nil, tenant, chunk)))
		for _, r := range chunk {
			cleared[r.ID] = true
		}
	}
	var got []models.TrackedEvent
	testenv.Must(t, e.DB.Where("tenant_id = ?", tenant).Find(&got).Error)
	if len(got) != len(rows) {
		t.Fatalf("%d rows, want %d", len(got), len(rows))
	}
	for _, r := range got {
		if r.QueuePending == cleared[r.ID] {
			t.Errorf("event %q: pending %v, want %v", r.ID, r.QueuePending, !cleared[r.ID])
		}
	}
}
