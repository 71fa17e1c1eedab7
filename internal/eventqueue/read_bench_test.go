package eventqueue

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/eventq/eventq/internal/testenv"
)

// fullQueue starts a Redis holding one full queue of 380-byte events for tenant 1.
func fullQueue(b *testing.B) (*testenv.Redis, *Store) {
	r := testenv.StartRedis(b)
	rdb := r.Client()
	store := New(rdb)
	ev := []byte(`{"id":"` + strings.Repeat("x", 370) + `"}`)
	batch := make([][]byte, 1000)
	for i := range batch {
		batch[i] = ev
	}
	for range MaxRead / 1000 {
		if err := store.Append(context.Background(), 1, batch...); err != nil {
			b.Fatal(err)
		}
	}
	// The largest event's size, as AppendOnce keeps it: a full page of these fits in
	// DefaultMaxPageBytes, so it is read with the plain MULTI.
	if err := rdb.Set(context.Background(), SizeKey(1), len(ev), 0).Err(); err != nil {
		b.Fatal(err)
	}
	return r, store
}

// BenchmarkReadPage is the api's read path without HTTP: one full queue read into a page.
func BenchmarkReadPage(b *testing.B) {
	_, store := fullQueue(b)
	benchReadPage(b, store)
}

// BenchmarkReadPageCounted is the same read when the events' size is not known (the queue
// was filled before sizes were kept): the script that counts the page's bytes as it reads.
func BenchmarkReadPageCounted(b *testing.B) {
	r, store := fullQueue(b)
	r.Client().Del(context.Background(), SizeKey(1))
	benchReadPage(b, store)
}

// benchReadPage reads tenant 1's full queue into a page, b.N times.
func benchReadPage(b *testing.B, store *Store) {
	b.ReportAllocs()
	size := 0
	for b.Loop() {
		page, err := store.ReadPage(context.Background(), 1, MaxRead)
		if err != nil || page.Count != MaxRead {
			b.Fatal(err)
		}
		size = page.Size
		page.Release()
	}
	b.SetBytes(int64(size))
}

// BenchmarkRawLRANGE is its floor: the same LRANGE over a bare socket, the reply read whole.
func BenchmarkRawLRANGE(b *testing.B) {
	r, _ := fullQueue(b)
	c, err := net.Dial("tcp", r.Addr())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	rd := bufio.NewReaderSize(c, 256<<10)
	key := Key(1)
	cmd := fmt.Sprintf("*4\r\n$6\r\nLRANGE\r\n$%d\r\n%s\r\n$1\r\n0\r\n$4\r\n9999\r\n", len(key), key)
	buf := make([]byte, 0, 8<<20)
	for b.Loop() {
		c.Write([]byte(cmd))
		buf = buf[:0]
		line, _ := rd.ReadSlice('\n')
		n, _ := strconv.Atoi(string(line[1 : len(line)-2]))
		for range n {
			line, _ = rd.ReadSlice('\n')
			size, _ := strconv.Atoi(string(line[1 : len(line)-2]))
			start := len(buf)
			buf = buf[:start+size+2]
			if _, err := io.ReadFull(rd, buf[start:]); err != nil {
				b.Fatal(err)
			}
			buf = buf[:len(buf)-2]
		}
	}
	b.SetBytes(int64(len(buf)))
}
