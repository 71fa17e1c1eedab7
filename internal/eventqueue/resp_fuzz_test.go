package eventqueue

import (
	"bytes"
	"context"
	"io"
	"net"
	"strconv"
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

// multiHead is the start of a read's replies when the queue's events are small: WATCH and GET
// of the largest size (100 bytes), then MULTI and the two commands queued; EXEC's follows.
const multiHead = "+OK\r\n$3\r\n100\r\n+OK\r\n+QUEUED\r\n+QUEUED\r\n"

// scriptHead is its start when the size is not known: WATCH, GET, then UNWATCH; the script's
// reply follows.
const scriptHead = "+OK\r\n$-1\r\n+OK\r\n"

// reply encodes the replies of a read of small events.
func reply(offset int, events ...string) []byte {
	var b bytes.Buffer
	o := strconv.Itoa(offset)
	b.WriteString(multiHead + "*2\r\n")
	b.WriteString("$" + strconv.Itoa(len(o)) + "\r\n" + o + "\r\n")
	b.WriteString("*" + strconv.Itoa(len(events)) + "\r\n")
	for _, e := range events {
		b.WriteString("$" + strconv.Itoa(len(e)) + "\r\n" + e + "\r\n")
	}
	return b.Bytes()
}

// readReply parses raw as the reply of a read, streaming the events or filling the page.
func readReply(raw []byte, stream bool) (*Page, []byte, error) {
	c := &respConn{conn: &replayConn{r: bytes.NewReader(raw)}}
	page, err := c.open(context.Background(), nil, 0, "k", "o", "m", MaxRead, DefaultMaxPageBytes)
	if err != nil {
		return nil, nil, err
	}
	var got bytes.Buffer
	if stream {
		err = page.Stream(func(bufs net.Buffers, last bool) error {
			for _, b := range bufs {
				got.Write(b)
			}
			return nil
		})
	} else if err = page.Fill(); err == nil {
		_, err = page.WriteTo(&got)
	}
	if err != nil {
		page.Release()
		return nil, nil, err
	}
	return page, got.Bytes(), nil
}

// Whatever bytes a server answers, the parser returns an error or a consistent page (its size
// and count match what it writes), and never panics or hangs.
func FuzzRESPReply(f *testing.F) {
	f.Add(reply(0))
	f.Add(reply(7, `{"id":"a"}`, `{"id":"b"}`))
	f.Add(reply(3, "", "\r\n$3\r\n*2\r\n"))
	f.Add([]byte(multiHead + "*2\r\n$-1\r\n*1\r\n$1\r\nx\r\n"))
	f.Add([]byte(scriptHead + "*2\r\n$-1\r\n*1\r\n$1\r\nx\r\n"))
	f.Add([]byte(multiHead + "*-1\r\n" + scriptHead + "*2\r\n$1\r\n3\r\n*1\r\n$1\r\nx\r\n"))
	f.Add([]byte("+OK\r\n$3\r\n100\r\n+OK\r\n-MOVED 1 127.0.0.1:7000\r\n-MOVED 1 127.0.0.1:7000\r\n-EXECABORT x\r\n"))
	f.Add([]byte("-MOVED 1 127.0.0.1:7000\r\n-MOVED 1 127.0.0.1:7000\r\n"))
	f.Add([]byte(multiHead + "*2\r\n$1\r\n1\r\n-WRONGTYPE x\r\n"))
	f.Add([]byte(multiHead + "*2\r\n$1\r\n1\r\n*2\r\n$5\r\nab\r\n"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		page, got, err := readReply(raw, false)
		if err != nil {
			return
		}
		defer page.Release()
		if len(got) != page.Size {
			t.Fatalf("page size %d, wrote %d", page.Size, len(got))
		}
		// Without commas in the reply, the page splits back into exactly Count elements.
		if page.Count > 0 && !bytes.Contains(raw, []byte(",")) {
			if n := len(bytes.Split(got, []byte(","))); n != page.Count {
				t.Fatalf("%d events for a count of %d", n, page.Count)
			}
		}
		// Streamed, the same bytes come out.
		streamed, sgot, err := readReply(raw, true)
		if err != nil {
			t.Fatalf("filled, but streaming failed: %v", err)
		}
		streamed.Release()
		if !bytes.Equal(sgot, got) {
			t.Fatalf("streamed %q, filled %q", sgot, got)
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
		{[]byte(multiHead + "*2\r\n$-1\r\n*1\r\n$1\r\nx\r\n"), 0, "x"},
		{[]byte(scriptHead + "*2\r\n$1\r\n5\r\n*1\r\n$1\r\nx\r\n"), 5, "x"},
		// A larger event came in after the WATCH: the MULTI is aborted and read again.
		{[]byte(multiHead + "*-1\r\n" + multiHead + "*2\r\n$1\r\n4\r\n*1\r\n$1\r\ny\r\n"), 4, "y"},
	} {
		for _, stream := range []bool{false, true} {
			page, got, err := readReply(tc.raw, stream)
			if err != nil {
				t.Fatalf("%q: %v", tc.raw, err)
			}
			if string(got) != tc.want || page.Offset != tc.offset {
				t.Fatalf("%q: offset %d, events %q", tc.raw, page.Offset, got)
			}
			page.Release()
		}
	}
	for _, raw := range []string{
		multiHead + "*2\r\n$1\r\n1\r\n-WRONGTYPE x\r\n",
		"-MOVED 1 127.0.0.1:7000\r\n-MOVED 1 127.0.0.1:7000\r\n",
		"+OK\r\n$3\r\n100\r\n+OK\r\n-MOVED 1 127.0.0.1:7000\r\n-MOVED 1 127.0.0.1:7000\r\n-EXECABORT x\r\n",
		multiHead + "*2\r\n$1\r\n1\r\n*2\r\n$1\r\nx\r\n", // cut short
	} {
		for _, stream := range []bool{false, true} {
			if _, _, err := readReply([]byte(raw), stream); err == nil {
				t.Fatalf("%q: no error", raw)
			}
		}
	}
}
