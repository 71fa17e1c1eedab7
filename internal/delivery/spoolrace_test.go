package delivery

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"github.com/eventq/eventq/internal/database"
	"github.com/eventq/eventq/internal/eventqueue"
	"github.com/eventq/eventq/internal/testenv"
)

// gate holds the first command (or pipeline) that matches until the test lets it go.
type gate struct {
	match   func(redis.Cmder) bool
	reached chan struct{} // closed when the command arrives
	release chan struct{} // closed by the test
}

func newGate(match func(redis.Cmder) bool) *gate {
	return &gate{match: match, reached: make(chan struct{}), release: make(chan struct{})}
}

func (g *gate) hold(cmds ...redis.Cmder) {
	for _, cmd := range cmds {
		if !g.match(cmd) {
			continue
		}
		select {
		case <-g.reached:
		default:
			close(g.reached)
			<-g.release
		}
		return
	}
}

func (g *gate) DialHook(next redis.DialHook) redis.DialHook { return next }
func (g *gate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		g.hold(cmd)
		return next(ctx, cmd)
	}
}
func (g *gate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		g.hold(cmds...)
		return next(ctx, cmds)
	}
}

// spoolWrite matches the first write of a spooled request (the spool's event count).
func spoolWrite(cmd redis.Cmder) bool {
	args := cmd.Args()
	return cmd.Name() == "incrby" && len(args) > 1 && args[1] == eventqueue.SpoolEventsKey
}

// startGatedIngest is an Ingestor with the spool on whose Redis commands pass g.
func startGatedIngest(t *testing.T, g *gate) *ingestEnv {
	t.Helper()
	db, _ := testenv.DB(t)
	r := testenv.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr()})
	t.Cleanup(func() { rdb.Close() })
	rdb.AddHook(g)
	e := newIngestEnv(t, db, r, rdb)
	e.Ingest.limits.Events = 1000
	return e
}

// answer is what Ingest returned.
type answer struct {
	ids []string
	err error
}

// ingestThree ingests three events of tenant in the background.
func (e *ingestEnv) ingestThree(tenant uint64) <-chan answer {
	answered := make(chan answer, 1)
	go func() {
		inputs := []Input{input("s", 1), input("s", 2), input("s", 3)}
		ids, err := e.Ingest.Ingest(context.Background(), tenant, inputs, Client{UserAgent: "test", IPAddress: "192.0.2.1"})
		answered <- answer{ids, err}
	}()
	return answered
}

// holdWrites holds db's write lock on tracked_events until the returned function is called.
func holdWrites(t *testing.T, db *gorm.DB) (release func()) {
	t.Helper()
	tx := db.Begin()
	testenv.Must(t, tx.Error)
	if database.IsPostgres(db) {
		testenv.Must(t, tx.Exec("LOCK TABLE tracked_events IN SHARE MODE").Error) // blocks inserts
	} else {
		testenv.Must(t, tx.Exec("UPDATE tenants SET id = id WHERE id = 0").Error) // takes the writer's lock
	}
	return func() { testenv.Must(t, tx.Rollback().Error) }
}

// A commit slower than spoolAfter is spooled, and may still land. When it lands and its
// events are appended before the spool is written (which sets the hold mark), the drain of
// the spooled copy must not append them again: it appended every spooled event whose id it
// did not find among the appended ones, and the commit's append records its pending batch,
// not the ids.
func TestASlowCommitThatLandsBeforeItsSpoolIsQueuedOnce(t *testing.T) {
	g := newGate(spoolWrite)
	e := startGatedIngest(t, g)
	db, ctx := e.DB, context.Background()
	tenant := testenv.MustTenant(t, db, true).ID
	if _, err := e.Flags.Queues(ctx, tenant); err != nil { // read before the lock
		t.Fatal(err)
	}

	release := holdWrites(t, db)
	answered := e.ingestThree(tenant)
	select {
	case <-g.reached: // the commit did not answer within spoolAfter
	case a := <-answered:
		release()
		t.Fatalf("answered %v before spooling", a)
	case <-time.After(30 * time.Second):
		release()
		t.Fatal("the request was not spooled within 30 s")
	}
	release() // the commit lands and its pusher appends, no hold mark set yet
	testenv.Eventually(t, 10*time.Second, "the committed events in the queue", func() bool { return e.QueueLen(t, tenant) == 3 })
	close(g.release)
	a := <-answered
	if a.err != nil {
		t.Fatal(a.err)
	}

	if _, err := e.Ingest.Delivery().DrainSpool(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Ingest.Delivery().DrainHeld(ctx, tenant); err != nil {
		t.Fatal(err)
	}
	if got := e.queueIDs(t, tenant); !slices.Equal(got, a.ids) {
		t.Fatalf("queue %v, want each of %v once, in order", got, a.ids)
	}
	if rows := e.Rows(t, tenant); rows != 3 {
		t.Fatalf("%d rows, want 3", rows)
	}
}

// A request whose pusher has taken it when spoolAfter runs out is committed: it is answered
// as such once its append is done, not spooled as well (its events, appended by its pending
// batch, would be appended again by id by the spool's drain).
func TestACommitWhoseAppendIsSlowIsNotSpooled(t *testing.T) {
	e, g, tenant, answered := heldAppend(t)
	ctx := context.Background()
	var a answer
	select {
	case a = <-answered:
		t.Fatalf("answered %v, %v while its append is held", a.ids, a.err)
	case <-time.After(spoolAfter + time.Second): // spoolAfter runs out with the append held
	}
	close(g.release)
	select {
	case a = <-answered: // once the append is done
	case <-time.After(30 * time.Second):
		t.Fatal("not answered within 30 s of its append")
	}
	if a.err != nil || len(a.ids) != 3 {
		t.Fatalf("answered %v, %v; want three ids", a.ids, a.err)
	}
	if n, _ := e.Queue.SpoolEvents(ctx); n != 0 {
		t.Fatalf("the spool holds %d events of a committed request", n)
	}
	// The held append missed its deadline: its events are pending, for the re-pusher.
	e.Clock.Advance(RequeueMinAge + time.Second)
	testenv.Eventually(t, 10*time.Second, "the events queued", func() bool {
		e.mustRequeue(t)
		return e.QueueLen(t, tenant) >= 3
	})
	e.mustRequeue(t)
	if _, err := e.Ingest.Delivery().DrainSpool(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	if got := e.queueIDs(t, tenant); !slices.Equal(got, a.ids) {
		t.Fatalf("queue %v, want each of %v once, in order", got, a.ids)
	}
}

// A request committed at about spoolAfter, whose append is slow, is answered once its append
// is done, not before: its client's next request, sent on the answer and taken by another api
// process, is queued after it. Answered while its append was still on its way (as it was), the
// next request's events went in first, out of order, as seen during a Citus rebalance, whose
// shard moves make commits slow. And an append that fails holds the tenant's later events,
// whichever process takes them, behind its own until the re-pusher drains them in order.
func TestASlowAppendIsAnsweredAfterItAndOrderHolds(t *testing.T) {
	e, g, tenant, answered := heldAppend(t)
	other := e.newIngester(t, Options{Queue: eventqueue.New(e.Redis.Client()), Spool: eventqueue.SpoolLimits{Events: 1000}})
	ctx := context.Background()
	var first answer
	select {
	case first = <-answered: // (answered early: the next request overtakes it below)
	case <-time.After(spoolAfter + time.Second):
		close(g.release)
		first = <-answered
	}
	if first.err != nil {
		t.Fatal(first.err)
	}
	inputs := []Input{input("s", 4), input("s", 5), input("s", 6)}
	second, err := other.Ingest(ctx, tenant, inputs, Client{UserAgent: "test", IPAddress: "192.0.2.1"})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-g.release:
	default:
		close(g.release)
	}
	// The first append, held past its deadline, failed: its events are pending, and the
	// second's held behind them until the re-pusher drains them in order.
	if _, err := e.Ingest.Delivery().DrainHeld(ctx, tenant); err != nil {
		t.Fatal(err)
	}
	want := append(slices.Clone(first.ids), second...)
	testenv.Eventually(t, 10*time.Second, "both requests queued", func() bool { return e.QueueLen(t, tenant) == 6 })
	if got := e.queueIDs(t, tenant); !slices.Equal(got, want) {
		t.Fatalf("queue %v, want %v: the second request's events after the first's", got, want)
	}
}

// appendOf matches the pusher's append to the queue of the tenant *tenant names, once set.
func appendOf(tenant *uint64) func(redis.Cmder) bool {
	return func(cmd redis.Cmder) bool {
		args := cmd.Args()
		return *tenant != 0 && (cmd.Name() == "evalsha" || cmd.Name() == "eval") && len(args) > 3 && args[3] == eventqueue.Key(*tenant)
	}
}

// heldAppend starts a gated ingest whose gate holds the first append to a new tenant's queue,
// ingests three events of that tenant in the background, and returns once the append is held.
func heldAppend(t *testing.T) (e *ingestEnv, g *gate, tenant uint64, answered <-chan answer) {
	t.Helper()
	g = newGate(appendOf(&tenant))
	e = startGatedIngest(t, g)
	tn := testenv.MustTenant(t, e.DB, true).ID
	if _, err := e.Flags.Queues(context.Background(), tn); err != nil {
		t.Fatal(err)
	}
	tenant = tn
	answered = e.ingestThree(tenant)
	select {
	case <-g.reached:
	case <-time.After(30 * time.Second):
		t.Fatal("no append within 30 s")
	}
	return e, g, tenant, answered
}
