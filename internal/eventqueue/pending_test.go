package eventqueue

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/eventq/eventq/internal/testenv"
)

// spanBatch is tenant's batch of the given spans, each of n events named "<span>-<i>".
func spanBatch(tenant uint64, spans map[string]int, order ...string) (Batch, []string) {
	b := Batch{TenantID: tenant}
	var all []string
	for _, id := range order {
		for i := range spans[id] {
			ev := fmt.Sprintf("%s-%d", id, i)
			b.Events = append(b.Events, Event{ID: ev, JSON: []byte(ev)})
			all = append(all, ev)
		}
		b.Pending = append(b.Pending, Span{ID: id, N: spans[id]})
	}
	return b, all
}

// appendedOf is PendingAppended of one batch: its count, and whether it has a record.
func appendedOf(s *Store, tenant uint64, id string) (int64, bool, error) {
	got, err := s.PendingAppended(context.Background(), tenant, id)
	n, ok := got[id]
	return n, ok, err
}

func mustLRange(t *testing.T, s *Store, tenant uint64) []string {
	t.Helper()
	got, err := s.rdb.LRange(context.Background(), Key(tenant), 0, -1).Result()
	testenv.Must(t, err)
	return got
}

// An append deduplicated by pending batch records how many of each batch's events went in,
// none per event; the same batch appended again, or after a claim, goes in not at all.
func TestPendingBatchesAreAppendedOnce(t *testing.T) {
	r := testenv.StartRedis(t)
	s := New(r.Client())
	defer s.Close()
	ctx := context.Background()
	const tenant = 7
	b, all := spanBatch(tenant, map[string]int{"a": 3, "b": 2}, "a", "b")

	res := s.AppendOnce(ctx, time.Now(), []Batch{b})[0]
	if res.Err != nil || res.Appended != 5 || res.Held != 0 || len(res.Skipped) != 0 {
		t.Fatalf("first append: %+v", res)
	}
	for id, want := range map[string]int64{"a": 3, "b": 2} {
		if n, ok, err := appendedOf(s, tenant, id); err != nil || !ok || n != want {
			t.Fatalf("record of %s: %d %v %v, want %d", id, n, ok, err, want)
		}
	}
	if n, _ := s.rdb.Exists(ctx, AppendedKey(tenant)).Result(); n != 0 {
		t.Fatal("per-event entries were written")
	}
	res = s.AppendOnce(ctx, time.Now(), []Batch{b})[0]
	if res.Err != nil || res.Appended != 0 || !slices.Equal(res.Skipped, []string{"a", "b"}) {
		t.Fatalf("second append: %+v", res)
	}
	if got := mustLRange(t, s, tenant); !slices.Equal(got, all) {
		t.Fatalf("queue %q, want %q", got, all)
	}

	t.Run("a claim answers the count, and keeps out an append that comes after it", func(t *testing.T) {
		if n, err := s.ClaimPending(ctx, tenant, "a"); err != nil || n != 3 {
			t.Fatalf("claim of an appended batch: %d %v, want 3", n, err)
		}
		if n, err := s.ClaimPending(ctx, tenant, "c"); err != nil || n != -1 {
			t.Fatalf("claim of a batch never appended: %d %v, want -1", n, err)
		}
		if n, err := s.ClaimPending(ctx, tenant, "c"); err != nil || n != -1 {
			t.Fatalf("second claim: %d %v, want -1", n, err)
		}
		c, _ := spanBatch(tenant, map[string]int{"c": 2, "d": 1}, "c", "d")
		res := s.AppendOnce(ctx, time.Now(), []Batch{c})[0]
		if res.Err != nil || res.Appended != 1 || !slices.Equal(res.Skipped, []string{"c"}) {
			t.Fatalf("append of a claimed and a fresh batch: %+v", res)
		}
		if got := mustLRange(t, s, tenant); !slices.Equal(got, append(slices.Clone(all), "d-0")) {
			t.Fatalf("queue %q", got)
		}
	})
	t.Run("forgotten records are gone, and records expire", func(t *testing.T) {
		ttl, err := s.rdb.PTTL(ctx, PendingKey(tenant, "b")).Result()
		if err != nil || ttl <= 0 || ttl > Retention {
			t.Fatalf("TTL %s %v", ttl, err)
		}
		testenv.Must(t, s.ForgetPending(ctx, tenant, []string{"a", "b"}))
		if _, ok, err := appendedOf(s, tenant, "b"); ok || err != nil {
			t.Fatalf("record of b after forget: %v %v", ok, err)
		}
	})
}

// A full queue holds from the first event that does not fit, across batches, and each batch's
// record counts its events that went in; behind a hold mark or during a rebuild nothing goes
// in, and each record says 0.
func TestPendingBatchesAreHeldInOrder(t *testing.T) {
	r := testenv.StartRedis(t)
	s := New(r.Client())
	defer s.Close()
	ctx := context.Background()
	s.MaxLength = 4
	const tenant = 8
	b, all := spanBatch(tenant, map[string]int{"a": 3, "b": 3, "c": 2}, "a", "b", "c")
	res := s.AppendOnce(ctx, time.Now(), []Batch{b})[0]
	if res.Err != nil || res.Appended != 4 || res.Held != 4 || !res.Marked {
		t.Fatalf("append into a queue of 4: %+v", res)
	}
	if got := mustLRange(t, s, tenant); !slices.Equal(got, all[:4]) {
		t.Fatalf("queue %q, want %q", got, all[:4])
	}
	for id, want := range map[string]int64{"a": 3, "b": 1, "c": 0} {
		if n, _, _ := appendedOf(s, tenant, id); n != want {
			t.Fatalf("record of %s: %d, want %d", id, n, want)
		}
	}
	s.MaxLength = 0
	d, _ := spanBatch(tenant, map[string]int{"d": 1}, "d")
	if res := s.AppendOnce(ctx, time.Now(), []Batch{d})[0]; res.Appended != 0 || res.Held != 1 {
		t.Fatalf("append behind the hold mark: %+v", res)
	}
	if n, _, _ := appendedOf(s, tenant, "d"); n != 0 {
		t.Fatalf("record of a held batch: %d, want 0", n)
	}

	const rebuilt = 10 // a tenant whose queue is being rebuilt, without a hold mark
	testenv.Must(t, s.rdb.Set(ctx, RebuildKey(rebuilt), "1", time.Minute).Err())
	e, _ := spanBatch(rebuilt, map[string]int{"e": 2}, "e")
	if res := s.AppendOnce(ctx, time.Now(), []Batch{e})[0]; res.Err != nil || res.Appended != 0 || res.Held != 2 {
		t.Fatalf("append during a rebuild: %+v", res)
	}
	if n, ok, _ := appendedOf(s, rebuilt, "e"); !ok || n != 0 {
		t.Fatalf("record of a batch held by a rebuild: %d %v, want 0", n, ok)
	}
	if got := mustLRange(t, s, rebuilt); len(got) != 0 {
		t.Fatalf("queue %q during a rebuild", got)
	}
}

// Spans go to the script whole, as many as fit in maxScriptEvents events a call: a batch of
// more events than that is appended in order, each span's record exact.
func TestManyPendingBatchesInOneAppend(t *testing.T) {
	r := testenv.StartRedis(t)
	s := New(r.Client())
	defer s.Close()
	ctx := context.Background()
	const tenant = 9
	spans := map[string]int{}
	var order []string
	for i := range 9 {
		id := fmt.Sprintf("s%d", i)
		spans[id], order = 300+i*100, append(order, id) // 300 … 1,100 events: some alone in a call
	}
	b, all := spanBatch(tenant, spans, order...)
	res := s.AppendOnce(ctx, time.Now(), []Batch{b})[0]
	if res.Err != nil || res.Appended != len(all) {
		t.Fatalf("append: %+v (want %d appended)", res, len(all))
	}
	if got := mustLRange(t, s, tenant); !slices.Equal(got, all) {
		t.Fatalf("queue out of order (%d events)", len(got))
	}
	for _, id := range order {
		if n, _, _ := appendedOf(s, tenant, id); n != int64(spans[id]) {
			t.Fatalf("record of %s: %d, want %d", id, n, spans[id])
		}
	}
}

// The records of more batches than one MGET carries are read in several, each with its count,
// and a batch without a record is left out.
func TestPendingAppendedReadsManyRecords(t *testing.T) {
	r := testenv.StartRedis(t)
	s := New(r.Client())
	defer s.Close()
	ctx := context.Background()
	const tenant, n = 7, 2*maxScriptEvents + 5
	ids := make([]string, 0, n+1)
	for i := range n {
		id := fmt.Sprintf("b-%d", i)
		ids = append(ids, id)
		testenv.Must(t, r.Client().Set(ctx, PendingKey(tenant, id), i-1, time.Hour).Err())
	}
	ids = append(ids, "unrecorded")
	got, err := s.PendingAppended(ctx, tenant, ids...)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != n {
		t.Fatalf("%d records read, want %d", len(got), n)
	}
	for i := range n {
		if c, ok := got[ids[i]]; !ok || c != int64(i-1) {
			t.Fatalf("batch %s: %d (recorded %v), want %d", ids[i], c, ok, i-1)
		}
	}
	if _, ok := got["unrecorded"]; ok {
		t.Fatal("a batch without a record was reported")
	}
}
