package routes

import (
	"bytes"
	"compress/gzip"
	"net/http/httptest"
	"strings"
	"testing"
)

// What a body sent with stacked codings costs the api before any check: a 404 path and a
// tracking request, each with 200 gzip codings of a 4 KiB body.
//
//	go test -run '^$' -bench StackedCodings ./routes
func BenchmarkStackedCodings(b *testing.B) {
	const layers = 200
	body := []byte(`{"events":[]}` + strings.Repeat(" ", 4096))
	for i := 0; i < layers; i++ {
		var zb bytes.Buffer
		zw := gzip.NewWriter(&zb)
		zw.Write(body)
		zw.Close()
		body = zb.Bytes()
	}
	header := strings.TrimSuffix(strings.Repeat("gzip,", layers), ",")
	app := New(&Server{})
	for _, path := range []string{"/nowhere", "/api/track"} {
		b.Run(strings.TrimPrefix(path, "/"), func(b *testing.B) {
			for b.Loop() {
				req := httptest.NewRequest("POST", path, bytes.NewReader(body))
				req.Header.Set("Content-Encoding", header)
				res, err := app.Test(req, -1)
				if err != nil {
					b.Fatal(err)
				}
				res.Body.Close()
			}
		})
	}
}
