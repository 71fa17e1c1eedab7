package eventqueue

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/eventq/eventq/internal/testenv"
)

// BenchmarkAppend compares one request's append of 50 events: a bare RPUSH (no deduplication),
// AppendOnce, and AppendOnce followed by the Ack that settles the events, on a Redis without
// persistence so that only the commands' own cost shows.
func BenchmarkAppend(b *testing.B) {
	port := testenv.FreePort(b)
	cmd, err := testenv.StartRedisServer(port, b.TempDir(), "--appendonly", "no")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	rdb := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port)})
	b.Cleanup(func() { rdb.Close() })
	store := New(rdb)
	ctx := context.Background()
	payload := []byte(`{"id":"` + strings.Repeat("x", 370) + `"}`)
	seq := 0
	batch := func() Batch {
		bt := Batch{TenantID: 1, Events: make([]Event, 50)}
		for i := range bt.Events {
			seq++
			bt.Events[i] = Event{ID: fmt.Sprintf("0193aaaa-0000-7000-8000-%012d", seq), JSON: payload}
		}
		return bt
	}
	trim := func(i int) {
		if i%200 == 0 { // keep the list short, as a consumer would
			rdb.LTrim(ctx, Key(1), -1000, -1)
		}
	}
	b.Run("rpush", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			bt := batch()
			raw := make([][]byte, len(bt.Events))
			for j, e := range bt.Events {
				raw[j] = e.JSON
			}
			if err := store.Append(ctx, 1, raw...); err != nil {
				b.Fatal(err)
			}
			trim(i)
		}
	})
	b.Run("append-once", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			if err := store.AppendOnce(ctx, time.Now(), []Batch{batch()})[0].Err; err != nil {
				b.Fatal(err)
			}
			trim(i)
		}
	})
	b.Run("append-once+ack", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			bt := batch()
			if err := store.AppendOnce(ctx, time.Now(), []Batch{bt})[0].Err; err != nil {
				b.Fatal(err)
			}
			ids := make([]string, len(bt.Events))
			for j, e := range bt.Events {
				ids[j] = e.ID
			}
			if err := store.ShortenDedup(ctx, time.Now(), 1, ids); err != nil {
				b.Fatal(err)
			}
			trim(i)
		}
	})
}
