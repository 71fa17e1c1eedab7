package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/eventq/eventq/internal/eventqueue/queuetest"

	"github.com/eventq/eventq/internal/testenv"
)

// cutProxy relays Redis's replies (testenv.StartProxy); once armed, it ends any connection's
// reply stream (a FIN to the api) as soon as it has passed cut bytes from Redis since arming:
// only a large reply reaches that.
type cutProxy struct {
	addr  string
	armed atomic.Bool
	cut   int64
}

func newCutProxy(t *testing.T, target string, cut int64) *cutProxy {
	p := &cutProxy{cut: cut}
	p.addr = testenv.StartProxy(t, target, func(client, server net.Conn) {
		p.relay(client, server)
		client.(*net.TCPConn).CloseWrite()
	})
	return p
}

// relay copies Redis's bytes to the client, closing both when armed and past the cut.
func (p *cutProxy) relay(client, server net.Conn) {
	buf := make([]byte, 32<<10)
	var sent int64
	for {
		n, err := server.Read(buf)
		if n > 0 {
			if p.armed.Load() {
				if sent += int64(n); sent > p.cut {
					client.Write(buf[:n-int(sent-p.cut)])
					server.Close()
					return
				}
			}
			if _, err := client.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// An identity read streamed as Redis answers, whose Redis connection is cut halfway through
// the page, reaches the client as a cut body (reading it fails), never as a shorter document
// that looks whole; the next read is whole.
func TestStreamedReadCutMidPageIsACutBody(t *testing.T) {
	r := testenv.StartRedis(t)
	db, dbURL := testenv.DB(t)
	proxy := newCutProxy(t, r.Addr(), 1<<20)
	e := startAPIOn(t, r, db, dbURL, "REDIS_URL=redis://"+proxy.addr)
	tn := testenv.MustTenant(t, e.DB, true)
	events := make([][]byte, 5000)
	for i := range events {
		events[i] = []byte(fmt.Sprintf(`{"id":"%d","pad":"%s"}`, i, strings.Repeat("x", 500)))
	}
	if err := queuetest.Append(context.Background(), e.Redis.Client(), tn.ID, events...); err != nil {
		t.Fatal(err)
	}
	read := func() (*http.Response, []byte, error) {
		req, _ := http.NewRequest("GET", e.Base+"/api/platform/events", nil)
		req.Header.Set("Authorization", "Bearer "+tn.Token)
		req.Header.Set("Accept-Encoding", "identity") // Go's client asks for gzip otherwise
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		body, err := io.ReadAll(res.Body)
		return res, body, err
	}

	proxy.armed.Store(true)
	res, body, err := read()
	if err == nil {
		t.Fatalf("status %d, a body of %d bytes read whole although Redis was cut after 1 MiB of 2.6 MB: %.100s", res.StatusCode, len(body), body)
	}
	if res.StatusCode != 200 || res.TransferEncoding == nil || len(body) == 0 {
		t.Fatalf("status %d, Transfer-Encoding %v, %d bytes before %v: not a streamed body", res.StatusCode, res.TransferEncoding, len(body), err)
	}

	proxy.armed.Store(false)
	if _, body, err := read(); err != nil || !strings.HasSuffix(string(body), `"pad":"`+strings.Repeat("x", 500)+`"}]}}`) {
		t.Fatalf("the next read: %d bytes, %v", len(body), err)
	}
}
