package openapicheck

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"sync"
)

// apis are the hosts (host:port) of the api processes the tests started (API): only the
// exchanges with them are checked; the same client also talks to fakes (the provider, a
// proxy answering HTML) and to metrics listeners.
var apis sync.Map

// API registers base (http://host:port) as an api process whose exchanges are checked.
func API(base string) {
	if u, err := url.Parse(base); err == nil {
		apis.Store(u.Host, true)
	}
}

// transport holds every exchange with a registered api made through it up to the document,
// as Check does, for documented routes only.
type transport struct {
	next http.RoundTripper
	mu   sync.Mutex
	errs []error
}

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	var reqBody []byte
	if req.Body != nil && req.GetBody != nil {
		if b, err := req.GetBody(); err == nil {
			reqBody, _ = io.ReadAll(b)
			b.Close()
		}
	}
	res, err := t.next.RoundTrip(req)
	if _, api := apis.Load(req.URL.Host); !api {
		return res, err
	}
	if err != nil || res.Header.Get("Content-Encoding") != "" || res.StatusCode == http.StatusSwitchingProtocols {
		return res, err
	}
	body, readErr := io.ReadAll(res.Body)
	res.Body.Close()
	res.Body = io.NopCloser(io.MultiReader(bytes.NewReader(body), errReader{readErr}))
	if readErr != nil {
		return res, nil // cut short (a process killed mid-answer): nothing to hold up
	}
	if cerr := check(req.Method, req.URL.String(), req.Header, reqBody, res.StatusCode, res.Header, body, false); cerr != nil {
		t.mu.Lock()
		t.errs = append(t.errs, cerr)
		t.mu.Unlock()
	}
	return res, nil
}

// errReader ends a body with the error its read ended with (nil: io.EOF).
type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	return 0, io.EOF
}

// Watching runs m's tests with every request of http.DefaultTransport held up to the
// document, and fails the run (exit status 1) listing each difference: for the packages whose
// tests drive api processes with plain HTTP clients (the SDK, the CLI, the end-to-end tests).
func Watching(m interface{ Run() int }) interface{ Run() int } { return watching{m} }

type watching struct{ m interface{ Run() int } }

func (w watching) Run() int {
	t := &transport{next: http.DefaultTransport}
	http.DefaultTransport = t
	code := w.m.Run()
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, err := range t.errs {
		fmt.Fprintln(os.Stderr, "openapi:", err)
	}
	if len(t.errs) > 0 {
		fmt.Fprintf(os.Stderr, "FAIL: %d exchanges differ from docs/openapi.yaml\n", len(t.errs))
		if code == 0 {
			code = 1
		}
	}
	return code
}
