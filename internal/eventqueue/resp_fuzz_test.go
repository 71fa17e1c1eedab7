package eventqueue

import (
	"bytes"
	"context"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// replayConn is a net.Conn whose reads replay a reply and whose writes are discarded.
type replayConn struct {
	net.Conn
	r io.Reader
}

func (c *replayConn) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (c *replayConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c *replayConn) SetDeadline(time.Time) error      { return nil }
func (c *replayConn) Close() error                     { return nil }
func (c *replayConn) SetReadDeadline(time.Time) error  { return nil }
func (c *replayConn) SetWriteDeadline(time.Time) error { return nil }

// reply encodes the replies of GET offset, LRANGE and GET offset.
func reply(offset int, events ...string) []byte {
	var b bytes.Buffer
	o := strconv.Itoa(offset)
	get := "$" + strconv.Itoa(len(o)) + "\r\n" + o + "\r\n"
	b.WriteString(get)
	b.WriteString("*" + strconv.Itoa(len(events)) + "\r\n")
	for _, e := range events {
		b.WriteString("$" + strconv.Itoa(len(e)) + "\r\n" + e + "\r\n")
	}
	b.WriteString(get)
	return b.Bytes()
}

// Whatever bytes a server answers, the parser returns an error or a consistent page (its size
// and count match what it writes), and never panics or hangs.
func FuzzRESPReply(f *testing.F) {
	f.Add(reply(0))
	f.Add(reply(7, `{"id":"a"}`, `{"id":"b"}`))
	f.Add(reply(3, "", "\r\n$3\r\n*2\r\n"))
	f.Add([]byte("$-1\r\n*1\r\n$1\r\nx\r\n$-1\r\n"))
	f.Add([]byte("-MOVED 1 127.0.0.1:7000\r\n-MOVED 1 127.0.0.1:7000\r\n-MOVED 1 127.0.0.1:7000\r\n"))
	f.Add([]byte("$1\r\n1\r\n-WRONGTYPE x\r\n$1\r\n1\r\n"))
	f.Add([]byte("$1\r\n1\r\n*2\r\n$5\r\nab\r\n"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		c := &respConn{conn: &replayConn{r: bytes.NewReader(raw)}}
		page, err := c.lrange(context.Background(), 0, "k", "o", MaxRead-1)
		if err != nil {
			return
		}
		defer page.Release()
		var got bytes.Buffer
		if _, err := page.WriteTo(&got); err != nil {
			t.Fatal(err)
		}
		if got.Len() != page.Size {
			t.Fatalf("page size %d, wrote %d", page.Size, got.Len())
		}
		// Without commas in the reply, the page splits back into exactly Count elements.
		if page.Count > 0 && !bytes.Contains(raw, []byte(",")) {
			if n := len(bytes.Split(got.Bytes(), []byte(","))); n != page.Count {
				t.Fatalf("%d events for a count of %d", n, page.Count)
			}
		}
	})
}

func TestRESPReplyParsesTheElements(t *testing.T) {
	for _, tc := range []struct {
		raw    []byte
		offset int64
		want   string
	}{
		{reply(7, `{"id":"a"}`, `{"id":"b"}`), 7, `{"id":"a"},{"id":"b"}`},
		{reply(0), 0, ""},
		{[]byte("$-1\r\n*1\r\n$1\r\nx\r\n$-1\r\n"), 0, "x"},
	} {
		c := &respConn{conn: &replayConn{r: bytes.NewReader(tc.raw)}}
		page, err := c.lrange(context.Background(), 0, "k", "o", MaxRead-1)
		if err != nil {
			t.Fatalf("%q: %v", tc.raw, err)
		}
		if got := pageString(t, page); got != tc.want || page.Offset != tc.offset {
			t.Fatalf("%q: offset %d, events %q", tc.raw, page.Offset, got)
		}
		page.Release()
	}
	for _, raw := range []string{
		"$1\r\n1\r\n-WRONGTYPE x\r\n$1\r\n1\r\n",
		"$1\r\n1\r\n*1\r\n$1\r\nx\r\n$1\r\n2\r\n", // a trim between: read again in a transaction
	} {
		c := &respConn{conn: &replayConn{r: strings.NewReader(raw)}}
		if _, err := c.lrange(context.Background(), 0, "k", "o", MaxRead-1); err == nil {
			t.Fatalf("%q: no error", raw)
		}
	}
}
