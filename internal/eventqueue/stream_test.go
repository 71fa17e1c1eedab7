package eventqueue

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/eventq/eventq/internal/testenv"
)

// A streaming page keeps its Redis connection until its client has taken the events, so a
// client that stops reading holds one. Only half of a node's connections are lent that way:
// with a pool of 2 and three clients stalled on their first bytes, the first streams and keeps
// a connection, the other two get their pages read whole (their connections go back before
// their clients are written to, in one last call), and a fourth read still gets the free
// connection at once. Without the limit the second stalled stream would hold the last
// connection and the fourth read would wait.
func TestStalledStreamsLeaveConnectionsForOtherReads(t *testing.T) {
	r := testenv.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr(), PoolSize: 2})
	defer rdb.Close()
	store := New(rdb)
	defer store.Close()
	ctx := context.Background()
	var want []string
	for i := range 3000 {
		want = append(want, fmt.Sprintf(`{"n":%d,"pad":"%s"}`, i, strings.Repeat("x", 400)))
	}
	for i := 0; i < len(want); i += 500 {
		batch := make([][]byte, 0, 500)
		for _, e := range want[i : i+500] {
			batch = append(batch, []byte(e))
		}
		if err := store.Append(ctx, 1, batch...); err != nil {
			t.Fatal(err)
		}
	}

	stall := make(chan struct{})
	type result struct {
		body  string
		calls int
		err   error
	}
	results := make(chan result, 3)
	firstWrite := make(chan struct{}, 3)
	readCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for i := range 3 {
		page, err := store.OpenPage(readCtx, 1, MaxRead)
		if err != nil {
			close(stall)
			t.Fatalf("page %d: %v", i+1, err)
		}
		go func() {
			defer page.Release()
			var b bytes.Buffer
			calls := 0
			err := page.Stream(func(bufs net.Buffers, last bool) error {
				calls++
				for _, p := range bufs {
					b.Write(p)
				}
				if calls == 1 {
					firstWrite <- struct{}{}
					<-stall // the client does not read
				}
				return nil
			})
			results <- result{b.String(), calls, err}
		}()
		<-firstWrite // each stream has begun (and stalled) before the next page is opened
	}

	page, err := store.ReadPage(readCtx, 1, 10)
	if err != nil {
		t.Fatalf("a read while three clients stall: %v", err)
	}
	page.Release()

	close(stall)
	streamed := 0
	for range 3 {
		res := <-results
		if res.err != nil || res.body != strings.Join(want, ",") {
			t.Fatalf("a stalled client's page: %d bytes, %v", len(res.body), res.err)
		}
		if res.calls > 1 {
			streamed++
		}
	}
	if streamed != 1 {
		t.Fatalf("%d of 3 pages streamed, want 1 (half of a pool of 2)", streamed)
	}
}

// A streamed page hands each chunk back to the pool once its events are written: a full page
// of 3.8 MB (15 chunks) holds at most two at any time, and what it writes is the page. Without
// the recycling it holds every chunk until it is released.
func TestStreamedPageKeepsFewChunks(t *testing.T) {
	events := make([]string, MaxRead)
	for i := range events {
		events[i] = fmt.Sprintf(`{"id":"%08d","p":"%s"}`, i, strings.Repeat("x", 360))
	}
	c := &respConn{conn: &replayConn{r: bytes.NewReader(reply(7, events...))}}
	page, err := c.open(context.Background(), nil, 0, "k", "o", "m", MaxRead, DefaultMaxPageBytes)
	if err != nil {
		t.Fatal(err)
	}
	defer page.Release()
	var got bytes.Buffer
	most := 0
	err = page.Stream(func(bufs net.Buffers, last bool) error {
		most = max(most, len(page.chunks))
		for _, b := range bufs {
			got.Write(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.Join(events, ","); got.String() != want {
		t.Fatalf("streamed %d bytes, want the page's %d", got.Len(), len(want))
	}
	if most > 2 || len(page.chunks) > 2 {
		t.Fatalf("the page held up to %d chunks (%d at the end) of a %d-byte reply: want at most 2", most, len(page.chunks), got.Len())
	}
}
