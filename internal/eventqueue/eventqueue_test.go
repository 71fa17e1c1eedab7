package eventqueue

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/eventq/eventq/internal/testenv"
)

func pageString(t *testing.T, p *Page) string {
	t.Helper()
	var b bytes.Buffer
	if _, err := p.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	if b.Len() != p.Size {
		t.Fatalf("page size %d, wrote %d bytes", p.Size, b.Len())
	}
	return b.String()
}

// The fast reader parses replies that straddle its 256 KiB chunks at every kind of place (a
// header, an element, the CRLF after it), elements larger than a chunk, empty elements and
// payloads holding RESP-looking bytes; it returns exactly what go-redis's path returns.
func TestReadPageMatchesTheStoredElements(t *testing.T) {
	r := testenv.StartRedis(t)
	rdb := r.Client()
	store := New(rdb)
	defer store.Close()
	if store.fast == nil {
		t.Fatal("no fast reader for a plain client")
	}
	slow := &Store{rdb: rdb}
	ctx := context.Background()

	rng := rand.New(rand.NewPCG(1, 2))
	var want []string
	add := func(e string) {
		want = append(want, e)
		if err := store.Append(ctx, 7, []byte(e)); err != nil {
			t.Fatal(err)
		}
	}
	add("")
	add(`{"crlf":"\r\n$3\r\n*2\r\n"}`)
	add(strings.Repeat("a", 600<<10)) // larger than two chunks
	add("")
	for len(want) < 3000 {
		size := rng.IntN(700)
		if rng.IntN(50) == 0 {
			size = rng.IntN(90 << 10)
		}
		add(fmt.Sprintf("%d:%s", len(want), strings.Repeat("x", size)))
	}

	for range 3 { // the second and third reuse the pooled connection
		page, err := store.ReadPage(ctx, 7, MaxRead)
		if err != nil {
			t.Fatal(err)
		}
		got := pageString(t, page)
		page.Release()
		if page.Count != 0 {
			t.Fatal("Release kept the page's fields")
		}
		if got != strings.Join(want, ",") {
			t.Fatalf("page differs from the stored elements (%d bytes, want %d)", len(got), len(strings.Join(want, ",")))
		}
		got, calls := streamCalls(t, store, 7)
		if got != strings.Join(want, ",") {
			t.Fatalf("streamed page differs from the stored elements (%d bytes, want %d)", len(got), len(strings.Join(want, ",")))
		}
		if calls < 2 { // about 1.6 MB: Redis's reply comes in several reads
			t.Fatalf("a page of %d bytes streamed in %d call", len(got), calls)
		}
	}
	page, err := slow.ReadPage(ctx, 7, MaxRead)
	if err != nil {
		t.Fatal(err)
	}
	if page.Count != len(want) || pageString(t, page) != strings.Join(want, ",") {
		t.Fatal("the go-redis path returns something else")
	}

	empty, err := store.ReadPage(ctx, 8, MaxRead)
	if err != nil || empty.Count != 0 || empty.Size != 0 {
		t.Fatalf("empty queue: %+v, %v", empty, err)
	}
}

func TestReadPageAfterRedisRestartsAndAfterAnErrorReply(t *testing.T) {
	r := testenv.StartRedis(t)
	rdb := r.Client()
	store := New(rdb)
	defer store.Close()
	ctx := context.Background()
	if err := store.Append(ctx, 1, []byte(`{"a":1}`), []byte(`{"b":2}`)); err != nil {
		t.Fatal(err)
	}
	read := func() string {
		t.Helper()
		page, err := store.ReadPage(ctx, 1, MaxRead)
		if err != nil {
			t.Fatal(err)
		}
		defer page.Release()
		return pageString(t, page)
	}
	if got := read(); got != `{"a":1},{"b":2}` {
		t.Fatalf("got %q", got)
	}

	// An error reply leaves the connection usable.
	rdb.Set(ctx, Key(2), "not a list", 0)
	if _, err := store.ReadPage(ctx, 2, MaxRead); err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Fatalf("wrong type: %v", err)
	}
	if got := read(); got != `{"a":1},{"b":2}` {
		t.Fatalf("after an error reply: %q", got)
	}

	// The pooled connection dies with the server (AOF keeps the list); the next read redials.
	r.Stop()
	r.Start()
	if got := read(); got != `{"a":1},{"b":2}` {
		t.Fatalf("after a restart: %q", got)
	}

	// A cancelled context fails the read; the next one works.
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := store.ReadPage(cancelled, 1, MaxRead); err == nil {
		t.Fatal("read with a cancelled context succeeded")
	}
	if got := read(); got != `{"a":1},{"b":2}` {
		t.Fatalf("after a cancelled read: %q", got)
	}
}

// The fast reader's own connections authenticate and select the URL's database.
func TestReadPageAuthenticatesAndSelectsTheDatabase(t *testing.T) {
	r := testenv.StartRedis(t)
	if err := r.Client().ConfigSet(context.Background(), "requirepass", "s3cret").Err(); err != nil {
		t.Fatal(err)
	}
	opt, err := redis.ParseURL(fmt.Sprintf("redis://:s3cret@127.0.0.1:%d/3", r.Port))
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	store := New(rdb)
	defer store.Close()
	ctx := context.Background()
	if err := store.Append(ctx, 1, []byte(`{"db":3}`)); err != nil {
		t.Fatal(err)
	}
	page, err := store.ReadPage(ctx, 1, MaxRead)
	if err != nil {
		t.Fatal(err)
	}
	if got := pageString(t, page); got != `{"db":3}` {
		t.Fatalf("got %q", got)
	}

	opt.Password = "wrong"
	bad := New(redis.NewClient(opt))
	defer bad.Close()
	if _, err := bad.ReadPage(ctx, 1, MaxRead); err == nil {
		t.Fatal("read with a wrong password succeeded")
	}
}

// A chunk boundary falls at each byte around the second element: in the first element's
// CRLF, in the second's header, at its payload's start.
func TestReadPageAcrossAChunkBoundaryAtEveryOffset(t *testing.T) {
	r := testenv.StartRedis(t)
	store := New(r.Client())
	defer store.Close()
	ctx := context.Background()
	for k := -4; k <= 12; k++ {
		// Appended without a size (Append): the replies are WATCH's and GET's and UNWATCH's
		// "+OK\r\n$-1\r\n+OK\r\n" (15 bytes), the script's "*2\r\n$-1\r\n" (9: no offset
		// yet), "*3\r\n" (4), "$<size>\r\n" (9 bytes for 6 digits), the payload, CRLF; the
		// second element's header then starts at 39+size, k bytes before the end of the first
		// chunk.
		want := []string{strings.Repeat("p", chunkSize-39-k), "ab", "cdefghijklmnopq"}
		tenant := uint64(100 + k)
		if err := store.Append(ctx, tenant, []byte(want[0]), []byte(want[1]), []byte(want[2])); err != nil {
			t.Fatal(err)
		}
		page, err := store.ReadPage(ctx, tenant, MaxRead)
		if err != nil {
			t.Fatalf("k=%d: %v", k, err)
		}
		if got := pageString(t, page); got != strings.Join(want, ",") || page.Count != 3 {
			t.Fatalf("k=%d: got %d events, ...%q", k, page.Count, got[max(0, len(got)-40):])
		}
		page.Release()
		if got := streamString(t, store, tenant); got != strings.Join(want, ",") {
			t.Fatalf("k=%d: streamed ...%q", k, got[max(0, len(got)-40):])
		}
	}
}

// streamString opens tenant's page and returns what Stream writes, checking that every call
// but the last carries bytes.
func streamString(t *testing.T, store *Store, tenant uint64) string {
	s, _ := streamCalls(t, store, tenant)
	return s
}

// streamCalls is streamString that also counts Stream's calls of write.
func streamCalls(t *testing.T, store *Store, tenant uint64) (string, int) {
	t.Helper()
	page, err := store.OpenPage(context.Background(), tenant, MaxRead)
	if err != nil {
		t.Fatal(err)
	}
	defer page.Release()
	var b bytes.Buffer
	ended, calls := false, 0
	err = page.Stream(func(bufs net.Buffers, last bool) error {
		calls++
		if ended {
			t.Fatal("Stream wrote after the last call")
		}
		n := 0
		for _, p := range bufs {
			n += len(p)
			b.Write(p)
		}
		if n == 0 && !last {
			t.Fatal("Stream wrote nothing, not on the last call")
		}
		ended = last
		return nil
	})
	if err != nil || !ended {
		t.Fatalf("Stream: %v (ended %v)", err, ended)
	}
	return b.String(), calls
}

// A page holds at most MaxPageBytes of events (with their commas), and at least one event
// however large, on the read path and through go-redis alike.
func TestPageIsBoundedByBytes(t *testing.T) {
	r := testenv.StartRedis(t)
	ctx := context.Background()
	fast := New(r.Client())
	defer fast.Close()
	slow := New(r.Client())
	slow.fast = nil
	event := func(i, size int) []byte {
		head := fmt.Sprintf(`{"id":"%04d","p":"`, i)
		return []byte(head + strings.Repeat("x", size-len(head)-2) + `"}`)
	}
	for i := 0; i < 600; i++ { // 300 bytes each: 256 events a slice of the script, and more
		if err := fast.Append(ctx, 1, event(i, 300)); err != nil {
			t.Fatal(err)
		}
	}
	if err := fast.Append(ctx, 2, event(0, 5000), event(1, 30)); err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]*Store{"read path": fast, "go-redis": slow} {
		for _, tc := range []struct {
			tenant     uint64
			limit      int
			maxBytes   int64
			wantEvents int
		}{
			{1, MaxRead, 1000, 3},      // 3×300+2 = 902; a fourth makes 1203
			{1, MaxRead, 902, 3},       // exactly
			{1, MaxRead, 901, 2},       // one byte short
			{1, 2, 1 << 20, 2},         // the limit first
			{1, MaxRead, 1 << 20, 600}, // every event, past a slice of 256
			{1, MaxRead, 90300, 300},   // 300×301−1 = 90299
			{2, MaxRead, 1000, 1},      // one event larger than the bound still comes
			{2, MaxRead, 5031, 2},
			{2, MaxRead, 5030, 1},
		} {
			s.MaxPageBytes = tc.maxBytes
			page, err := s.ReadPage(ctx, tc.tenant, tc.limit)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			got := pageString(t, page)
			if page.Count != tc.wantEvents || (tc.wantEvents > 1 && int64(len(got)) > tc.maxBytes) ||
				!strings.HasPrefix(got, `{"id":"0000"`) || strings.Count(got, `{"id"`) != tc.wantEvents {
				t.Fatalf("%s, tenant %d, limit %d, %d bytes: %d events (%d bytes), want %d", name, tc.tenant, tc.limit, tc.maxBytes, page.Count, len(got), tc.wantEvents)
			}
			page.Release()
		}
	}
}

// Appends keep the largest event's size (SizeKey), which a read takes as every event's: the
// page holds as many as fit at that size, read with one LRANGE. Emptied and appended to
// again, the size is the new events'.
func TestPageOfAppendedEventsIsBoundedByBytes(t *testing.T) {
	r := testenv.StartRedis(t)
	ctx := context.Background()
	s := New(r.Client())
	defer s.Close()
	event := func(i, size int) Event {
		head := fmt.Sprintf(`{"id":"%04d","p":"`, i)
		return Event{ID: fmt.Sprint(i), JSON: []byte(head + strings.Repeat("x", size-len(head)-2) + `"}`)}
	}
	appendSized := func(tenant uint64, from int, sizes ...int) {
		t.Helper()
		b := Batch{TenantID: tenant}
		for i, size := range sizes {
			b.Events = append(b.Events, event(from+i, size))
		}
		if out := s.AppendOnce(ctx, time.Now(), []Batch{b}); out[0].Err != nil || out[0].Appended != len(sizes) {
			t.Fatalf("append: %+v", out[0])
		}
	}
	sizes := make([]int, 50)
	for i := range sizes {
		sizes[i] = 100
	}
	appendSized(1, 0, sizes...)
	if got := r.Client().Get(ctx, SizeKey(1)).Val(); got != "100" {
		t.Fatalf("size %q, want 100", got)
	}
	check := func(tenant uint64, limit int, maxBytes int64, want int) {
		t.Helper()
		s.MaxPageBytes = maxBytes
		page, err := s.ReadPage(ctx, tenant, limit)
		if err != nil {
			t.Fatal(err)
		}
		defer page.Release()
		got := pageString(t, page)
		if page.Count != want || (want > 1 && int64(len(got)) > maxBytes) {
			t.Fatalf("tenant %d, limit %d, %d bytes: %d events (%d bytes), want %d", tenant, limit, maxBytes, page.Count, len(got), want)
		}
	}
	check(1, 50, 50*101-1, 50) // 50 events fit exactly
	check(1, 50, 50*101-2, 49) // one byte short
	check(1, 10, 1000, 9)
	appendSized(1, 50, 3000) // a large one at the back
	if got := r.Client().Get(ctx, SizeKey(1)).Val(); got != "3000" {
		t.Fatalf("size %q, want 3000", got)
	}
	check(1, 51, 1<<20, 51)
	// As many as fit were each as large as the largest: fewer than fit, never more.
	check(1, 51, 50*101-1, 1)
	check(1, 51, 3*3001-1, 3)
	if _, err := s.Trim(ctx, 1, 51, -1); err != nil {
		t.Fatal(err)
	}
	appendSized(1, 51, 200, 150)
	if got := r.Client().Get(ctx, SizeKey(1)).Val(); got != "200" {
		t.Fatalf("size after the queue emptied %q, want 200", got)
	}
	check(1, 2, 2*201-1, 2)
	check(1, 2, 2*201-2, 1)
}
