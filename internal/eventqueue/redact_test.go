package eventqueue

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eventq/eventq/internal/testenv"
)

// A redaction walks the queue while a consumer trims its front and a producer appends: every
// matching event still in the queue is rewritten in its place, once; nothing else changes; the
// offset is the consumer's alone; each step of the walk is bounded (SLOWLOG shows no command
// near 50 ms on a queue of 200,000).
func TestRedactQueueRewritesInPlaceWhileTrimmed(t *testing.T) {
	r := testenv.StartRedis(t)
	rdb := r.Client()
	store := New(rdb)
	defer store.Close()
	ctx := context.Background()
	const tenant, n = 7, 200_000
	batch := make([][]byte, 0, 10_000)
	for i := 0; i < n; i++ {
		who := "other"
		if i%1000 == 0 {
			who = "erased"
		}
		batch = append(batch, []byte(fmt.Sprintf(`{"id":"%08d","who":"%s"}`, i, who)))
		if len(batch) == cap(batch) {
			testenv.Must(t, store.Append(ctx, tenant, batch...))
			batch = batch[:0]
		}
	}
	testenv.Must(t, rdb.ConfigSet(ctx, "slowlog-log-slower-than", "10000").Err()) // 10 ms
	testenv.Must(t, rdb.SlowLogReset(ctx).Err())
	rewrite := func(el []byte) ([]byte, bool) {
		if !bytes.Contains(el, []byte(`"who":"erased"`)) {
			return nil, false
		}
		return bytes.Replace(el, []byte(`"who":"erased"`), []byte(`"who":""`), 1), true
	}
	var wg sync.WaitGroup
	trimmed := int64(0)
	stop := make(chan struct{})
	wg.Add(1)
	go func() { // a consumer trimming 50 at a time from the front, with offsets
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			res, err := store.Trim(ctx, tenant, 50, trimmed)
			if err != nil {
				t.Error(err)
				return
			}
			trimmed = res.Front
		}
	}()
	got, err := store.RedactQueue(ctx, tenant, rewrite)
	close(stop)
	wg.Wait()
	testenv.Must(t, err)
	// The walk's and the consumer's commands, before the test's own whole-queue LRANGE below.
	slow, err := rdb.SlowLogGet(ctx, 20).Result()
	testenv.Must(t, err)
	for _, e := range slow {
		if e.Duration.Milliseconds() >= 50 {
			t.Errorf("a command took %s: %v", e.Duration, e.Args)
		}
	}
	t.Logf("rewrote %d; %d commands over 10 ms", got, len(slow))
	// Every erased event still in the queue is rewritten; the ones trimmed before the walk
	// reached them were not counted.
	els, err := rdb.LRange(ctx, Key(tenant), 0, -1).Result()
	testenv.Must(t, err)
	off, err := rdb.Get(ctx, OffsetKey(tenant)).Int64()
	testenv.Must(t, err)
	if off != trimmed || int64(len(els))+off != n {
		t.Fatalf("offset %d (trimmed %d), length %d: the redaction moved the queue", off, trimmed, len(els))
	}
	left := 0
	for i, el := range els {
		if strings.Contains(el, `"who":"erased"`) {
			left++
		}
		if want := fmt.Sprintf(`"id":"%08d"`, off+int64(i)); !strings.Contains(el, want) {
			t.Fatalf("position %d holds %s", off+int64(i), el)
		}
	}
	if left != 0 {
		t.Fatalf("%d erased events left in the queue", left)
	}
	inQueue := 0
	for i := off; i < n; i++ {
		if i%1000 == 0 {
			inQueue++
		}
	}
	if got < inQueue || got > n/1000 {
		t.Fatalf("%d rewritten, %d matching events were in the queue at the end", got, inQueue)
	}
	if again, err := store.RedactQueue(ctx, tenant, rewrite); err != nil || again != 0 {
		t.Fatalf("a second walk rewrote %d (%v)", again, err)
	}
}

// A dead letter dropped from the front while the walk is between a step's read and its write
// shifts every other one: the write refuses the step, and the walk is made again until every
// dead letter is rewritten (without a second walk, the first step's would stay as they were).
func TestRedactDeadLettersFollowsAShift(t *testing.T) {
	r := testenv.StartRedis(t)
	rdb := r.Client()
	store := New(rdb)
	defer store.Close()
	ctx := context.Background()
	const tenant, n = 8, 250
	for i := range n {
		testenv.Must(t, rdb.RPush(ctx, DeadKey(tenant), fmt.Sprintf("dl-%03d", i)).Err())
	}
	var once sync.Once
	rewrite := func(el []byte) ([]byte, bool) {
		once.Do(func() { testenv.Must(t, rdb.LPop(ctx, DeadKey(tenant)).Err()) }) // dropped meanwhile
		if bytes.HasPrefix(el, []byte("redacted-")) {
			return nil, false
		}
		return append([]byte("redacted-"), el...), true
	}
	written, err := store.RedactDeadLetters(ctx, tenant, rewrite)
	testenv.Must(t, err)
	els, err := rdb.LRange(ctx, DeadKey(tenant), 0, -1).Result()
	testenv.Must(t, err)
	if len(els) != n-1 || written != n-1 {
		t.Fatalf("%d dead letters, %d rewritten; want %d of each", len(els), written, n-1)
	}
	for i, el := range els {
		if want := fmt.Sprintf("redacted-dl-%03d", i+1); el != want {
			t.Fatalf("dead letter %d is %q, want %q", i, el, want)
		}
	}
}

// A redaction that makes an event larger raises the queue's largest size, which a page is
// read by: a page never holds more than its bound because an event grew in place.
func TestRedactionRaisesTheLargestSize(t *testing.T) {
	rdb := testenv.StartRedis(t).Client()
	s := New(rdb)
	defer s.Close()
	ctx := context.Background()
	b := Batch{TenantID: 1}
	for i := range 3 {
		b.Events = append(b.Events, Event{ID: fmt.Sprint(i), JSON: []byte(fmt.Sprintf(`{"id":"%d","url":"?email=a"}`, i))})
	}
	if out := s.AppendOnce(ctx, time.Now(), []Batch{b}); out[0].Err != nil {
		t.Fatal(out[0].Err)
	}
	before, _ := rdb.Get(ctx, SizeKey(1)).Int()
	grown := []byte(`{"id":"1","url":"?email=` + strings.Repeat("r", 100) + `"}`)
	n, err := s.RedactQueue(ctx, 1, func(el []byte) ([]byte, bool) {
		if bytes.Contains(el, []byte(`"id":"1"`)) {
			return grown, true
		}
		return nil, false
	})
	if err != nil || n != 1 {
		t.Fatalf("redacted %d: %v", n, err)
	}
	if after, _ := rdb.Get(ctx, SizeKey(1)).Int(); after != len(grown) || after <= before {
		t.Fatalf("largest size %d after an event grew to %d (before %d)", after, len(grown), before)
	}
}
