package eventqueue

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/eventq/eventq/internal/testenv"
)

func mustSettleBatches(t *testing.T, s *Store, tenant uint64, items ...AckItem) ([]Settled, Trimmed) {
	t.Helper()
	out, tr, err := s.Settle(context.Background(), tenant, items, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return out, tr
}

func batch(id string) AckItem { return AckItem{Kind: KindBatch, LeaseID: id} }

func wantSettled(t *testing.T, got []Settled, want ...Settled) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("outcomes %v, want %v", got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("outcomes %v, want %v", got, want)
		}
	}
}

func acked(n int64) Settled { return Settled{Status: StatusAcked, Acked: n} }

var unknownBatch = Settled{Status: StatusUnknown}

// Batch acks on a single Redis and on a Redis Cluster: a batch id acknowledges every event
// its lease call handed out, new and leased again, as an ack of each lease id would.
func TestBatchAcks(t *testing.T) {
	for name, s := range leaseStores(t) {
		t.Run(name, func(t *testing.T) { testBatchAcks(t, s) })
	}
}

func testBatchAcks(t *testing.T, s *Store) {
	ctx := context.Background()
	t.Run("acknowledges what is left of the batch and trims the front", func(t *testing.T) {
		appendN(t, s, 1, 1, 6)
		a := mustLease(t, s, 1, 3, time.Minute, 10)
		b := mustLease(t, s, 1, 10, time.Minute, 10)
		if len(a.BatchID) > 128 || a.BatchID == b.BatchID {
			t.Fatalf("batch ids %q and %q", a.BatchID, b.BatchID)
		}
		got, tr := mustSettleBatches(t, s, 1, AckItem{Kind: KindAck, LeaseID: b.Events[0].LeaseID}, batch(b.BatchID))
		wantSettled(t, got, Settled{Status: StatusAcked}, acked(1))
		if tr.Count != 0 {
			t.Fatalf("a batch behind an unacknowledged one trimmed %+v", tr)
		}
		got, tr = mustSettleBatches(t, s, 1, batch(a.BatchID), batch(a.BatchID), batch(b.BatchID))
		wantSettled(t, got, acked(3), acked(0), acked(0))
		if tr.Count != 5 || tr.Front != 5 || tr.LastID != ev(5).ID {
			t.Fatalf("trimmed %+v, want all five", tr)
		}
		if leased, _, _ := s.LeaseCounts(ctx, 1, DeadPolicy{}); leased != 0 {
			t.Fatalf("%d leased after the batch acks", leased)
		}
		st, _ := mustSettle(t, s, 1, KindAck, a.Events[0].LeaseID)
		wantStatuses(t, st, StatusAlreadyAcked)
	})

	t.Run("a batch of events leased again is honoured after its expiry", func(t *testing.T) {
		appendN(t, s, 2, 1, 5)
		first := mustLease(t, s, 2, 2, time.Second, 10)
		mid := mustLease(t, s, 2, 2, time.Minute, 10)
		fresh := 10
		expireThenLease := func(live int64, limit int) LeaseResult {
			t.Helper()
			testenv.Eventually(t, 5*time.Second, "the lease runs out", func() bool {
				n, _, err := s.LeaseCounts(ctx, 2, DeadPolicy{})
				return err == nil && n == live
			})
			appendN(t, s, 2, fresh, fresh+1) // and a new event
			fresh++
			return mustLease(t, s, 2, limit, time.Minute, 10)
		}
		again := expireThenLease(2, 3)
		if !slices.Equal(offsetsOf(again), []int64{0, 1, 4}) || again.Events[0].Deliveries != 2 || again.Events[2].Deliveries != 1 {
			t.Fatalf("leased again %+v", again)
		}
		// The first batch's lease ran out, and its events are another batch's now: the work
		// was done, so acknowledging it acknowledges them, and the second batch has one left.
		got, tr := mustSettleBatches(t, s, 2, batch(first.BatchID))
		wantSettled(t, got, acked(2))
		if tr.Count != 2 {
			t.Fatalf("trimmed %+v", tr)
		}
		got, tr = mustSettleBatches(t, s, 2, batch(again.BatchID))
		wantSettled(t, got, acked(1))
		if tr.Count != 0 {
			t.Fatalf("trimmed %+v behind offset 2", tr)
		}
		got, tr = mustSettleBatches(t, s, 2, batch(mid.BatchID))
		wantSettled(t, got, acked(2))
		if tr.Count != 3 || tr.Front != 5 {
			t.Fatalf("trimmed %+v", tr)
		}
		// Leased again and acknowledged by its later batch: the events leased again are in it.
		appendN(t, s, 2, 5, 6)
		rest := mustLease(t, s, 2, 1, time.Second, 10)
		again = expireThenLease(0, 5)
		if !slices.Equal(offsetsOf(again), []int64{5, 6}) {
			t.Fatalf("leased again %+v", again)
		}
		got, _ = mustSettleBatches(t, s, 2, batch(again.BatchID), batch(rest.BatchID))
		wantSettled(t, got, acked(2), acked(0))
		if off, _ := s.Offset(ctx, 2); off != 7 {
			t.Fatalf("front %d, want 7", off)
		}
	})

	t.Run("skips events trimmed or gone to the dead letters", func(t *testing.T) {
		appendN(t, s, 3, 1, 5)
		a := mustLease(t, s, 3, 2, time.Minute, 1)
		if _, err := s.Trim(ctx, 3, 1, -1); err != nil {
			t.Fatal(err)
		}
		b := mustLease(t, s, 3, 2, 0, 1) // expired at once: the next lease sends them to the dead letters
		c := mustLease(t, s, 3, 5, time.Minute, 1)
		if len(c.Events) != 0 || c.DeadAdded != 2 {
			t.Fatalf("the lease after max deliveries: %+v", c)
		}
		got, tr := mustSettleBatches(t, s, 3, batch(a.BatchID), batch(b.BatchID), batch(c.BatchID))
		wantSettled(t, got, acked(1), acked(0), acked(0))
		if tr.Count != 3 || tr.Front != 4 { // offset 1 (a's), and the two dead letters behind it
			t.Fatalf("trimmed %+v", tr)
		}
	})

	t.Run("a batch id cannot be derived from another, and a forged one costs no script", func(t *testing.T) {
		appendN(t, s, 7, 1, 3)
		mine := mustLease(t, s, 7, 1, time.Minute, 10)   // offset 1
		theirs := mustLease(t, s, 7, 1, time.Minute, 10) // offset 2, another consumer's
		parts := strings.Split(mine.BatchID, "-")
		if len(parts) != 6 {
			t.Fatalf("batch id %q", mine.BatchID)
		}
		var forged []AckItem
		step := slices.Clone(parts)
		step[1], step[2] = "2", "3" // the next run of offsets, with my signature
		forged = append(forged, batch(strings.Join(step, "-")))
		step = slices.Clone(parts)
		step[3] = strings.Split(theirs.BatchID, "-")[3] // their nonce, my signature
		forged = append(forged, batch(strings.Join(step, "-")))
		unsigned := strings.Join(parts[:5], "-")
		forged = append(forged, batch(unsigned), batch(unsigned+"-"+strings.Repeat("0", 24)))
		for len(forged) < 1000 {
			forged = append(forged, batch(fmt.Sprintf("%s-%d-%d-%s-0-%024x", parts[0], len(forged), len(forged)+1000, parts[3], len(forged))))
		}
		scripts := func() string { // the scripts every node has run
			var infos []string
			if cc, ok := s.rdb.(*redis.ClusterClient); ok {
				var mu sync.Mutex
				cc.ForEachShard(ctx, func(ctx context.Context, c *redis.Client) error {
					mu.Lock()
					defer mu.Unlock()
					infos = append(infos, c.Options().Addr+" "+c.Info(ctx, "commandstats").Val())
					return nil
				})
				slices.Sort(infos)
			} else {
				infos = append(infos, s.rdb.Info(ctx, "commandstats").Val())
			}
			return strings.Join(regexp.MustCompile(`cmdstat_(evalsha|eval):calls=\d+`).FindAllString(strings.Join(infos, "\n"), -1), ",")
		}
		before := scripts()
		got, _, err := s.Settle(ctx, 7, forged, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		for i, g := range got {
			if g.Status != StatusUnknown {
				t.Fatalf("forged batch %d (%s): %+v", i, forged[i].LeaseID, g)
			}
		}
		if after := scripts(); after != before {
			t.Fatalf("forged batch ids ran scripts: %s, then %s", before, after)
		}
		if leased, _, _ := s.LeaseCounts(ctx, 7, DeadPolicy{}); leased != 2 {
			t.Fatalf("%d leased, want both still", leased)
		}
		got, _ = mustSettleBatches(t, s, 7, batch(theirs.BatchID), batch(mine.BatchID))
		wantSettled(t, got, acked(1), acked(1))
	})

	t.Run("unknown: another tenant's, not a batch id, or before a rebuild", func(t *testing.T) {
		appendN(t, s, 4, 1, 3)
		a := mustLease(t, s, 4, 1, time.Minute, 10)
		b := mustLease(t, s, 4, 1, time.Minute, 10)
		appendN(t, s, 5, 1, 3)
		forged := strings.Split(a.BatchID, "-")
		forged[2] = "5000" // more events than a batch holds
		got, _ := mustSettleBatches(t, s, 4, batch("nonsense"), batch(a.Events[0].LeaseID), batch(NoBatchID),
			batch(strings.Join(forged, "-")), batch(strings.Repeat("1", 129)))
		wantSettled(t, got, unknownBatch, unknownBatch, unknownBatch, unknownBatch, unknownBatch)
		got, _ = mustSettleBatches(t, s, 5, batch(a.BatchID))
		wantSettled(t, got, unknownBatch)
		if err := s.BeginRebuild(ctx, 4, 0); err != nil {
			t.Fatal(err)
		}
		got, _ = mustSettleBatches(t, s, 4, batch(b.BatchID))
		wantSettled(t, got, unknownBatch)
	})

	t.Run("batches of more events than one script takes are all acknowledged", func(t *testing.T) {
		appendN(t, s, 6, 0, 11*maxRange)
		var items []AckItem
		for range MaxLeased / maxRange {
			res := mustLease(t, s, 6, maxRange, time.Minute, 10)
			items = append(items, batch(res.BatchID))
		}
		mustSettleBatches(t, s, 6, items[0])
		items = append(items, batch(mustLease(t, s, 6, maxRange, time.Minute, 10).BatchID))
		got, tr := mustSettleBatches(t, s, 6, items...)
		if got[0] != acked(0) {
			t.Fatalf("outcomes %v", got)
		}
		for _, g := range got[1:] {
			if g != acked(maxRange) {
				t.Fatalf("outcomes %v", got)
			}
		}
		if tr.Count != MaxLeased || tr.Front != 11*maxRange {
			t.Fatalf("trimmed %+v over the scripts", tr)
		}
	})
}

// The offsets a batch leased again are remembered GoneRetention: a later lease call that
// records its own forgets them, so their number stays bounded, and the old batch is unknown.
func TestBatchRecordsAreForgottenAfterRetention(t *testing.T) {
	rdb := testenv.StartRedis(t).Client()
	s := New(rdb)
	t.Cleanup(s.Close)
	ctx := context.Background()
	appendN(t, s, 1, 1, 5)
	leaseAgain := func() LeaseResult {
		t.Helper()
		mustLease(t, s, 1, 1, 0, 10) // expired at once
		res := mustLease(t, s, 1, 1, time.Minute, 10)
		if res.Redelivered != 1 {
			t.Fatalf("leased %+v, want the expired event again", res)
		}
		return res
	}
	old := leaseAgain()
	nonce := strings.Split(old.BatchID, "-")[3] // epoch-first-end-nonce-again-signature
	if rdb.HExists(ctx, LeaseBatchesKey(1), nonce).Val() != true {
		t.Fatalf("no record of batch %s (nonce %s)", old.BatchID, nonce)
	}
	// Recorded longer ago than the retention.
	rdb.ZAdd(ctx, LeaseBatchesAtKey(1), redis.Z{Score: float64(time.Now().Add(-GoneRetention - time.Minute).UnixMilli()), Member: nonce})
	if _, _, err := s.Settle(ctx, 1, []AckItem{{Kind: KindRetry, LeaseID: old.Events[0].LeaseID}}, time.Minute); err != nil {
		t.Fatal(err)
	}
	newer := leaseAgain()
	if n := rdb.HLen(ctx, LeaseBatchesKey(1)).Val(); n != 2 || rdb.HExists(ctx, LeaseBatchesKey(1), nonce).Val() {
		t.Fatalf("%d records, the old one kept: %v", n, rdb.HKeys(ctx, LeaseBatchesKey(1)).Val())
	}
	got, _ := mustSettleBatches(t, s, 1, batch(old.BatchID), batch(newer.BatchID))
	wantSettled(t, got, unknownBatch, acked(1))
}

// The most events one ack script takes (maxBatchEvents) fit through every Redis call it
// makes, whether the batches go at once or wait behind an unacknowledged event, and whether
// they were touched before (a per-id ack of one of their events) or not.
func TestLargestBatchAcks(t *testing.T) {
	s := New(testenv.StartRedis(t).Client())
	t.Cleanup(s.Close)
	for _, touched := range []bool{false, true} {
		tenant := uint64(31)
		if touched {
			tenant = 32
		}
		appendN(t, s, tenant, 0, maxBatchEvents)
		head := mustLease(t, s, tenant, 1, time.Minute, 10) // stays unacknowledged: nothing trims
		var items []AckItem
		var want []Settled
		for i := range maxBatchEvents / 1000 {
			size := 1000
			if i == 0 {
				size-- // the head is leased too, and MaxLeased at once
			}
			res := mustLease(t, s, tenant, size, time.Minute, 10)
			if len(res.Events) != size {
				t.Fatalf("leased %d", len(res.Events))
			}
			n := int64(size)
			if touched {
				mustSettleBatches(t, s, tenant, AckItem{Kind: KindAck, LeaseID: res.Events[500].LeaseID})
				n--
			}
			items = append(items, batch(res.BatchID))
			want = append(want, acked(n))
		}
		got, tr := mustSettleBatches(t, s, tenant, items...)
		wantSettled(t, got, want...)
		if tr.Count != 0 {
			t.Fatalf("trimmed %+v behind an unacknowledged event", tr)
		}
		got, tr = mustSettleBatches(t, s, tenant, AckItem{Kind: KindAck, LeaseID: head.Events[0].LeaseID})
		if got[0].Status != StatusAcked || tr.Count != maxBatchEvents {
			t.Fatalf("the head's ack: %v, trimmed %+v", got, tr)
		}
	}
}

// A tenant keeps at most maxBatchRecords records of batches with events leased again, the
// oldest forgotten first, however fast it redelivers: the newest batch stays known.
func TestBatchRecordsAreCapped(t *testing.T) {
	rdb := testenv.StartRedis(t).Client()
	s := New(rdb)
	t.Cleanup(s.Close)
	ctx := context.Background()
	appendN(t, s, 1, 1, 5)
	now := time.Now()
	for i := range maxBatchRecords + 50 { // older records, a second apart
		nonce := fmt.Sprintf("old%04d", i)
		rdb.HSet(ctx, LeaseBatchesKey(1), nonce, "1")
		rdb.ZAdd(ctx, LeaseBatchesAtKey(1), redis.Z{Score: float64(now.Add(time.Duration(i-maxBatchRecords-50) * time.Second).UnixMilli()), Member: nonce})
	}
	var last LeaseResult
	for range 2 {
		mustLease(t, s, 1, 1, 0, 10) // expired at once
		last = mustLease(t, s, 1, 1, time.Minute, 10)
		if last.Redelivered != 1 {
			t.Fatalf("leased %+v, want the expired event again", last)
		}
		mustSettle(t, s, 1, KindRetry, last.Events[0].LeaseID)
	}
	if n := rdb.HLen(ctx, LeaseBatchesKey(1)).Val(); n != maxBatchRecords {
		t.Fatalf("%d records, want %d", n, maxBatchRecords)
	}
	if n := rdb.ZCard(ctx, LeaseBatchesAtKey(1)).Val(); n != maxBatchRecords {
		t.Fatalf("%d record times, want %d", n, maxBatchRecords)
	}
	// Three calls leased an event again (the second round's expired one too): 1,053 records
	// made, the 53 oldest forgotten.
	if rdb.HExists(ctx, LeaseBatchesKey(1), "old0052").Val() || !rdb.HExists(ctx, LeaseBatchesKey(1), "old0053").Val() {
		t.Fatal("not the oldest records forgotten")
	}
	got, _ := mustSettleBatches(t, s, 1, batch(last.BatchID))
	wantSettled(t, got, acked(1))
}
