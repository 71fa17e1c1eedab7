package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/eventq/eventq/internal/eventqueue/queuetest"

	"github.com/eventq/eventq/internal/testenv"
)

// Pages of every kind of size through the real api: under 1 KiB a read is answered as is
// whatever the client accepts; from 1 KiB on it is compressed with its Content-Length; from
// 256 KiB on it is compressed in segments and sent chunked. In each case the decoded body equals
// the identity body byte for byte, the compressed body of a page of 100 events or more is at
// most a quarter of it, and the headers are those of any read. The identity body itself is sent
// with its Content-Length under 1,000 events and chunked, as it arrives from Redis, from 1,000.
func TestCompressedReadsOfEverySize(t *testing.T) {
	e := startAPI(t)
	tn := testenv.MustTenant(t, e.DB, true)
	events := make([][]byte, 10000)
	for i := range events {
		events[i] = []byte(fmt.Sprintf(`{"id":"0193%08x","type":"page_view","session_id":"s-%d","audience_member_id":null,`+
			`"url":"https://shop.example/p/%d?ref=mail&c=%s","page_hostname":"shop.example","page_path":"/p/%d",`+
			`"user_agent":"Mozilla/5.0 (X11; Linux x86_64) Firefox/124.0","ip_address":"203.0.113.7","event_sequence":%d,`+
			`"created_at":"2026-11-21T10:15:30+00:00"}`, i, i/7, i%500, strings.Repeat("x", i%40), i%500, i%7))
	}
	for i := 0; i < len(events); i += 1000 {
		if err := queuetest.Append(context.Background(), e.Redis.Client(), tn.ID, events[i:i+1000]...); err != nil {
			t.Fatal(err)
		}
	}
	get := func(t *testing.T, limit int, accept string) (*http.Response, []byte) {
		t.Helper()
		req, _ := http.NewRequest("GET", e.Base+"/api/platform/events?limit="+strconv.Itoa(limit), nil)
		req.Header.Set("Authorization", "Bearer "+tn.Token)
		req.Header.Set("Accept-Encoding", accept)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		if err != nil {
			t.Fatal(err)
		}
		if res.StatusCode != 200 || res.Header.Get("Queue-Offset") != "0" || res.Header.Get("Content-Type") != "application/json" ||
			res.Header.Get("Vary") != "Accept-Encoding" {
			t.Fatalf("limit %d, %s: %d, Queue-Offset %q, Content-Type %q, Vary %q", limit, accept, res.StatusCode,
				res.Header.Get("Queue-Offset"), res.Header.Get("Content-Type"), res.Header.Get("Vary"))
		}
		return res, b
	}
	for _, limit := range []int{1, 2, 3, 4, 100, 687, 688, 689, 690, 999, 1000, 2000, 9999, 10000} {
		t.Run(strconv.Itoa(limit)+" events", func(t *testing.T) {
			res, identity := get(t, limit, "identity")
			want := `{"data":{"count":` + strconv.Itoa(limit) + `,"events":[` + string(bytes.Join(events[:limit], []byte(","))) + `]}}`
			if string(identity) != want {
				t.Fatalf("identity body of %d bytes differs from the queue's %d", len(identity), len(want))
			}
			chunked := len(res.TransferEncoding) > 0 && res.TransferEncoding[0] == "chunked"
			if streamed := limit >= 1000; chunked != streamed || (!chunked && res.ContentLength != int64(len(identity))) {
				t.Fatalf("identity, %d events: Transfer-Encoding %v, Content-Length %d", limit, res.TransferEncoding, res.ContentLength)
			}
			for _, tc := range []struct {
				coding string
				decode func([]byte) ([]byte, error)
			}{{"gzip", gunzip}, {"zstd", unzstd}} {
				res, body := get(t, limit, tc.coding)
				if len(identity) < 1<<10 {
					if res.Header.Get("Content-Encoding") != "" || !bytes.Equal(body, identity) {
						t.Fatalf("%s, %d-byte page: Content-Encoding %q, body %q", tc.coding, len(identity), res.Header.Get("Content-Encoding"), body)
					}
					continue
				}
				if res.Header.Get("Content-Encoding") != tc.coding {
					t.Fatalf("%s: Content-Encoding %q", tc.coding, res.Header.Get("Content-Encoding"))
				}
				chunked := len(res.TransferEncoding) > 0 && res.TransferEncoding[0] == "chunked"
				if streamed := len(identity) >= 256<<10; chunked != streamed || (!chunked && res.ContentLength != int64(len(body))) {
					t.Fatalf("%s, %d-byte page: Transfer-Encoding %v, Content-Length %d", tc.coding, len(identity), res.TransferEncoding, res.ContentLength)
				}
				plain, err := tc.decode(body)
				if err != nil {
					t.Fatalf("%s: %v", tc.coding, err)
				}
				if !bytes.Equal(plain, identity) {
					t.Fatalf("%s: decoded body of %d bytes differs from the identity body of %d", tc.coding, len(plain), len(identity))
				}
				if limit >= 100 && len(body)*4 > len(identity) {
					t.Fatalf("%s: %d bytes, more than a quarter of identity's %d", tc.coding, len(body), len(identity))
				}
			}
		})
	}
}
