package eventqueue

import (
	"bytes"
	"strings"
	"testing"
)

func TestRESPArrayWriterAcceptsAnyChunking(t *testing.T) {
	reply := []byte("*3\r\n$7\r\n{\"a\":1}\r\n$0\r\n\r\n$9\r\n{\"b\":\"x\"}\r\n")
	want := `{"a":1},,{"b":"x"}`
	for size := 1; size <= len(reply); size++ {
		var out bytes.Buffer
		count := -1
		w := &respArrayWriter{out: &out, header: func(n int) { count = n }}
		for i := 0; i < len(reply); i += size {
			if _, err := w.Write(reply[i:min(i+size, len(reply))]); err != nil {
				t.Fatalf("chunk %d: %v", size, err)
			}
		}
		if err := w.finish(); err != nil || count != 3 || out.String() != want {
			t.Fatalf("chunk %d: count %d, %q, %v", size, count, out.String(), err)
		}
	}
}

func TestRESPArrayWriterRejectsMalformedReplies(t *testing.T) {
	for _, reply := range []string{
		"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
		"*2\r\n$3\r\nabc\r\n",      // ends early
		"$3\r\nabc\r\n",            // not an array
		"*1\r\n:5\r\n",             // not a bulk string
		"*1\r\n$3\r\nabc\r\nextra", // trailing data
	} {
		w := &respArrayWriter{out: &bytes.Buffer{}, header: func(int) {}}
		_, werr := w.Write([]byte(reply))
		if werr == nil && w.finish() == nil {
			t.Errorf("accepted %q", strings.TrimSpace(reply))
		}
	}
}
