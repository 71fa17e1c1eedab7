package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/eventq/eventq/internal/delivery"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/models"
)

// chromiumPath finds the Chromium binary `make test` installs; a missing browser is a
// failure, not a skip, so CI cannot go green without running the browser tests.
func chromiumPath(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat("/usr/bin/chromium"); err == nil {
		return "/usr/bin/chromium"
	}
	if p, err := exec.LookPath("chromium"); err == nil {
		return p
	}
	t.Fatal("Chromium not found at /usr/bin/chromium or on PATH: install the Debian package `chromium` (apt-get install -y chromium; `make test` does this)")
	return ""
}

// startBrowser launches headless Chromium for the test; tabs are opened with newTab. A
// browser that exits while starting (seen once on a loaded machine) gets one more try: the
// browser's start is the harness, not what the test checks.
func startBrowser(t *testing.T) context.Context {
	t.Helper()
	ctx, err := launchBrowser(t)
	if err != nil {
		t.Logf("start chromium: %v; trying once more", err)
		ctx, err = launchBrowser(t)
	}
	if err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

func launchBrowser(t *testing.T) (context.Context, error) {
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.Headless,
		chromedp.NoSandbox, // tests run as root in CI
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.UserDataDir(t.TempDir()),
		// Chromium leaves a directory of its own in TMPDIR (org.chromium.Chromium.*) after
		// every run: it goes in one of the test's, which is removed.
		chromedp.Env("TMPDIR="+shortTempDir(t)),
		// The test network is closed: without these Chromium's own background connections
		// fail and can take page connections down with them.
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
	)
	ctx, cancelTimeout := context.WithTimeout(context.Background(), 60*time.Second)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	browserCtx, cancelBrowser := chromedp.NewContext(allocCtx)
	t.Cleanup(func() { cancelBrowser(); cancelAlloc(); cancelTimeout() })
	if err := chromedp.Do(browserCtx); err != nil { // starts the browser
		return nil, err
	}
	return browserCtx, nil
}

// shortTempDir is a directory removed when t ends, with a shorter path than t.TempDir's: Chromium
// puts a Unix socket two levels below its TMPDIR, and a socket's path has at most 107 bytes.
func shortTempDir(t *testing.T) string {
	dir, err := os.MkdirTemp("", "chromium-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// tab is one browser tab with what it logged and what it sent to /api/track.
type tab struct {
	ctx context.Context
	mu  sync.Mutex
	log []string
	// track holds one line per request to /api/track: "<resource type> <content-type> -> <outcome>".
	track    map[network.RequestID]string
	trackIDs []network.RequestID
}

// newTab opens a tab in browser; on failure the test log shows the tab's console and requests.
func newTab(t *testing.T, browser context.Context) *tab {
	t.Helper()
	tb := &tab{track: map[network.RequestID]string{}}
	ctx, cancel := chromedp.NewContext(browser, chromedp.WithListener(tb.listen))
	t.Cleanup(cancel)
	tb.ctx = ctx
	t.Cleanup(func() {
		if t.Failed() {
			ctx, stop := context.WithTimeout(ctx, 5*time.Second)
			defer stop()
			vis, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.visibilityState`))
			if err != nil {
				vis = err.Error()
			}
			t.Logf("browser console:\n%s\nrequests to /api/track:\n%s\nthe page's visibility: %s",
				strings.Join(tb.Console(), "\n"), strings.Join(tb.TrackRequests(), "\n"), vis)
		}
	})
	return tb
}

func (tb *tab) listen(ev any) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	switch ev := ev.(type) {
	case *runtime.EventConsoleAPICalled:
		parts := []string{string(ev.Type) + ":"}
		for _, a := range ev.Args {
			if len(a.Value) > 0 {
				parts = append(parts, string(a.Value))
			} else {
				parts = append(parts, a.Description)
			}
		}
		tb.log = append(tb.log, strings.Join(parts, " "))
	case *runtime.EventExceptionThrown:
		tb.log = append(tb.log, "exception: "+ev.ExceptionDetails.Text+" "+exceptionText(ev.ExceptionDetails.Exception))
	case *cdplog.EventEntryAdded:
		tb.log = append(tb.log, fmt.Sprintf("%s %s: %s %s", ev.Entry.Source, ev.Entry.Level, ev.Entry.Text, ev.Entry.URL))
	case *network.EventRequestWillBeSent:
		if strings.HasSuffix(ev.Request.URL, "/api/track") {
			ct, _ := ev.Request.Headers["Content-Type"].(string)
			tb.track[ev.RequestID] = fmt.Sprintf("%s %s %s", ev.Type, ev.Request.Method, ct)
			tb.trackIDs = append(tb.trackIDs, ev.RequestID)
		}
	case *network.EventResponseReceived:
		if line, ok := tb.track[ev.RequestID]; ok {
			tb.track[ev.RequestID] = fmt.Sprintf("%s -> %d", line, ev.Response.Status)
		}
	case *network.EventLoadingFailed:
		if line, ok := tb.track[ev.RequestID]; ok {
			tb.track[ev.RequestID] = fmt.Sprintf("%s -> failed: %s %v", line, ev.ErrorText, ev.CorsErrorStatus)
		}
	}
}

func exceptionText(o *runtime.RemoteObject) string {
	if o == nil {
		return ""
	}
	return o.Description
}

// Console is what the page logged so far.
func (tb *tab) Console() []string {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	return slices.Clone(tb.log)
}

// TrackRequests describes the requests to /api/track so far, in order.
func (tb *tab) TrackRequests() []string {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	out := make([]string, len(tb.trackIDs))
	for i, id := range tb.trackIDs {
		out[i] = tb.track[id]
	}
	return out
}

// MustDo runs chromedp actions in the tab, in order.
func (tb *tab) MustDo(t *testing.T, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(tb.ctx, actions...); err != nil {
		t.Fatalf("browser: %v", err)
	}
}

// mustRun runs one chromedp action in tb and returns its value.
func mustRun[T any](t *testing.T, tb *tab, action chromedp.Action[T]) T {
	t.Helper()
	v, err := chromedp.Run(tb.ctx, action)
	if err != nil {
		t.Fatalf("browser: %v", err)
	}
	return v
}

// shopPage is a small single-page app on its own origin (localhost, while the api listens on
// 127.0.0.1) that loads the tracker from the api with the given extra attributes. beforeTracker
// is inline script run before the tracker loads.
func shopPage(t *testing.T, apiBase, siteKey, attrs, beforeTracker string) (origin string) {
	t.Helper()
	html := fmt.Sprintf(`<!doctype html>
<html><head><meta charset="utf-8"><title>Shop</title>
<script>%s</script>
<script src="%s/tracker.js" data-site-key="%s" %s defer></script>
</head><body>
<nav>
  <button id="to-page-2" onclick="go('/page/2')">Page 2</button>
  <a id="to-page-3" href="/page/3" onclick="go('/page/3'); return false">Page 3</a>
</nav>
<main id="view"></main>
<script>
  function render() { document.getElementById('view').textContent = 'You are on ' + location.pathname; }
  function go(path) { history.pushState({}, '', path); render(); }
  window.addEventListener('popstate', render);
  render();
</script>
</body></html>`, beforeTracker, apiBase, siteKey, attrs)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/favicon.ico" {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, html)
	}))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	return "http://localhost:" + u.Port()
}

// waitEvents polls the api until tn's queue holds n distinct events, and returns them by
// sequence. The tracker delivers at least once: a keepalive request that fails in the browser
// is sent again as a plain one, and one that failed late (a commit over a second under make
// test's load, answered from the spool) was stored too; it tells consumers to dedupe on
// session and sequence, and so does this, saying how many copies it dropped.
func waitEvents(t *testing.T, e *apiEnv, tn tenant, n int) []models.QueueEvent {
	t.Helper()
	var got []models.QueueEvent
	caughtUp, copies := 0, 0
	defer func() {
		if t.Failed() {
			t.Logf("%d of the %d events were readable (%d more copies); %d drained from the spool or requeued", len(got), n, copies, caughtUp)
		}
	}()
	testenv.Eventually(t, time.Minute, fmt.Sprintf("%d events are readable", n), func() bool {
		// On a loaded machine (make test runs four suites at once, Chromium and the api under
		// -race among them) a commit can take over a second: the request is then spooled
		// (tracking's spoolAfter) and the tenant's later events are held behind it until the
		// worker drains the spool; and a push to Redis that fails leaves its events for the
		// worker's re-pusher. No worker runs here: the test does both as the worker would.
		d, err := e.Main.App.Ingest.Delivery().DrainSpool(context.Background(), "browser test")
		if err != nil {
			t.Fatalf("drain the spool: %v", err)
		}
		r, err := e.Main.App.Ingest.Delivery().Requeue(context.Background(), delivery.RequeueMinAge)
		if err != nil {
			t.Fatalf("requeue: %v", err)
		}
		caughtUp += d + r
		got, copies = distinctEvents(t, e.MustRead(t, tn).Data.Events)
		return len(got) >= n
	})
	if caughtUp > 0 || copies > 0 {
		t.Logf("%d events went through the spool or were requeued; %d copies of events sent twice dropped", caughtUp, copies)
	}
	if len(got) != n {
		t.Fatalf("got %d events, want %d: %+v", len(got), n, got)
	}
	// Separate beacons may commit in either order; the sequence is the client's order.
	slices.SortFunc(got, func(a, b models.QueueEvent) int { return int(a.EventSequence - b.EventSequence) })
	return got
}

// distinctEvents keeps the first of the events with the same session and sequence, and says
// how many it dropped. The same event id twice is the queue's fault, not the tracker's: t fails.
func distinctEvents(t *testing.T, events []models.QueueEvent) ([]models.QueueEvent, int) {
	t.Helper()
	type key struct {
		session  string
		sequence int64
	}
	seen, ids := map[key]bool{}, map[string]bool{}
	out := events[:0:0]
	for _, ev := range events {
		if ids[ev.ID] {
			t.Fatalf("event %s is in the queue twice", ev.ID)
		}
		ids[ev.ID] = true
		k := key{ev.SessionID, ev.EventSequence}
		if !seen[k] {
			seen[k] = true
			out = append(out, ev)
		}
	}
	return out, len(events) - len(out)
}

// loadTracker navigates tb to origin's home page and waits for the tracker to run.
func loadTracker(t *testing.T, tb *tab, origin string) {
	t.Helper()
	tb.MustDo(t,
		chromedp.Navigate(origin+"/"),
		chromedp.WaitVisible(chromedp.ID("view")),
		chromedp.Poll[chromedp.Void](`window.eventq !== undefined && window.eventq.loaded === true`, chromedp.WithPollingTimeout(15*time.Second)),
	)
}

func TestBrowserTracksPageViews(t *testing.T) {
	testenv.OnOneDatabase(t)
	e := startAPI(t)
	browser := startBrowser(t)

	t.Run("records load and two history navigations from another origin", func(t *testing.T) {
		tn := testenv.MustTenant(t, e.DB, true)
		origin := shopPage(t, e.Base, tn.SiteKey, "", "")
		tb := newTab(t, browser)
		loadTracker(t, tb, origin)
		tb.MustDo(t,
			chromedp.Click(chromedp.ID("to-page-2")),
			chromedp.Evaluate[chromedp.Void](`location.hash = '#reviews'`), // fragment only: no event
			chromedp.Evaluate[chromedp.Void](`history.pushState({}, '', '/page/3')`),
			chromedp.Evaluate[chromedp.Void](`history.replaceState({}, '', '/page/3')`), // same URL: no event
		)
		// The tab's counter says no fourth event was recorded, so none can arrive later.
		seq := mustRun(t, tb, chromedp.Evaluate[string](fmt.Sprintf(`sessionStorage.getItem('eventq:%s:seq')`, tn.SiteKey)))
		if seq != "3" {
			t.Fatalf("tab recorded %s events, want 3", seq)
		}
		path := mustRun(t, tb, chromedp.Evaluate[string](`location.pathname`))
		userAgent := mustRun(t, tb, chromedp.Evaluate[string](`navigator.userAgent`))
		sessionID := mustRun(t, tb, chromedp.Evaluate[string](fmt.Sprintf(`sessionStorage.getItem('eventq:%s:sid')`, tn.SiteKey)))
		if path != "/page/3" || !regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`).MatchString(sessionID) {
			t.Fatalf("page at %q with session %q, want a random (version 4) UUID", path, sessionID)
		}

		got := waitEvents(t, e, tn, 3)
		for i, wantPath := range []string{"/", "/page/2", "/page/3"} {
			ev := got[i]
			if ev.Type != "page_view" || ev.URL != origin+wantPath || ev.PagePath != wantPath ||
				ev.PageHostname != "localhost" || ev.EventSequence != int64(i+1) ||
				ev.SessionID != sessionID || ev.AudienceMemberID != nil {
				t.Errorf("event %d = %+v\nwant page_view %s%s, host localhost, sequence %d, session %s, no member",
					i, ev, origin, wantPath, i+1, sessionID)
			}
			if ev.UserAgent != userAgent || !strings.Contains(ev.UserAgent, "Chrome") {
				t.Errorf("event %d user agent %q, want the browser's %q", i, ev.UserAgent, userAgent)
			}
			if ev.IPAddress != "127.0.0.1" {
				t.Errorf("event %d ip %q, want 127.0.0.1", i, ev.IPAddress)
			}
		}
		// Sent as beacons (DevTools type Ping) with a CORS-safelisted type: no preflight.
		for _, r := range tb.TrackRequests() {
			if !strings.HasPrefix(r, "Ping POST text/plain") {
				t.Errorf("request to /api/track %q, want a text/plain beacon", r)
			}
		}
	})

	t.Run("carries the member id and custom events", func(t *testing.T) {
		tn := testenv.MustTenant(t, e.DB, true)
		origin := shopPage(t, e.Base, tn.SiteKey, `data-member-id="member-7"`, "")
		tb := newTab(t, browser)
		loadTracker(t, tb, origin)
		tb.MustDo(t, chromedp.Evaluate[chromedp.Void](`
			eventq.track('Not A Type');
			eventq.setMember('member-8');
			eventq.track('cart.add', {url: '/cart?item=1'});`))

		got := waitEvents(t, e, tn, 2)
		want := []struct{ typ, path, member string }{{"page_view", "/", "member-7"}, {"cart.add", "/cart", "member-8"}}
		for i, w := range want {
			ev := got[i]
			if ev.Type != w.typ || ev.PagePath != w.path || ev.AudienceMemberID == nil || *ev.AudienceMemberID != w.member ||
				ev.EventSequence != int64(i+1) {
				t.Errorf("event %d = %+v, want %s at %s by %s, sequence %d", i, ev, w.typ, w.path, w.member, i+1)
			}
		}
		if got[1].URL != origin+"/cart?item=1" {
			t.Errorf("custom event url %q", got[1].URL)
		}
		if !slices.ContainsFunc(tb.Console(), func(l string) bool { return strings.Contains(l, "ignored event type") }) {
			t.Errorf("no console warning for the invalid type; console: %q", tb.Console())
		}
	})

	t.Run("splits a burst into requests of at most 100 beyond the keepalive quota", func(t *testing.T) {
		tn := testenv.MustTenant(t, e.DB, true)
		origin := shopPage(t, e.Base, tn.SiteKey, "", "")
		tb := newTab(t, browser)
		loadTracker(t, tb, origin)
		// ~140 KB in one tick: more than the 64 KiB Chrome allows for keepalive requests in
		// flight, so later batches are refused by sendBeacon and keepalive fetch alike.
		tb.MustDo(t, chromedp.Evaluate[chromedp.Void](`for (let i = 0; i < 1000; i++) eventq.track('scroll.depth')`))

		got := waitEvents(t, e, tn, 1001)
		for i, ev := range got {
			if ev.EventSequence != int64(i+1) {
				t.Fatalf("event %d has sequence %d", i, ev.EventSequence)
			}
		}
		if reqs := tb.TrackRequests(); len(reqs) < 11 {
			t.Errorf("%d requests for 1001 events: %q", len(reqs), reqs)
		}
	})

	t.Run("a burst from a tab in the background loses nothing", func(t *testing.T) {
		tn := testenv.MustTenant(t, e.DB, true)
		origin := shopPage(t, e.Base, tn.SiteKey, "", "")
		tb := newTab(t, browser)
		loadTracker(t, tb, origin)
		// The page reports itself hidden, as a tab in the background does while it lives: the
		// batches both keepalive ways refuse still go out with a plain fetch.
		tb.MustDo(t, chromedp.Evaluate[chromedp.Void](`
			Object.defineProperty(document, 'visibilityState', {get: () => 'hidden'});
			for (let i = 0; i < 1000; i++) eventq.track('scroll.depth')`))
		if got := waitEvents(t, e, tn, 1001); got[len(got)-1].EventSequence != 1001 {
			t.Fatalf("last event has sequence %d", got[len(got)-1].EventSequence)
		}
	})

	t.Run("sends what is queued when the page goes away", func(t *testing.T) {
		tn := testenv.MustTenant(t, e.DB, true)
		// No timers: only the pagehide/visibilitychange flush can send anything.
		origin := shopPage(t, e.Base, tn.SiteKey, "", `window.setTimeout = function () { return 0; };`)
		tb := newTab(t, browser)
		loadTracker(t, tb, origin)
		tb.MustDo(t, chromedp.Evaluate[chromedp.Void](`eventq.track('checkout.click')`))
		if n := len(e.MustRead(t, tn).Data.Events); n != 0 {
			t.Fatalf("%d events sent before the page went away", n)
		}
		tb.MustDo(t, chromedp.Navigate("about:blank"))

		got := waitEvents(t, e, tn, 2)
		if got[0].Type != "page_view" || got[1].Type != "checkout.click" || got[1].EventSequence != 2 {
			t.Errorf("events %+v", got)
		}
	})

	t.Run("falls back to fetch over CORS when sendBeacon refuses", func(t *testing.T) {
		tn := testenv.MustTenant(t, e.DB, true)
		stub := `
			navigator.sendBeacon = function () { return false; };
			window.trackStatuses = [];
			const realFetch = window.fetch;
			window.fetch = function () {
				return realFetch.apply(this, arguments).then(
					function (r) { trackStatuses.push(r.status); return r; },
					function (err) { trackStatuses.push(String(err)); throw err; });
			};`
		origin := shopPage(t, e.Base, tn.SiteKey, "", stub)
		tb := newTab(t, browser)
		loadTracker(t, tb, origin)
		tb.MustDo(t, chromedp.Click(chromedp.ID("to-page-3")))

		got := waitEvents(t, e, tn, 2)
		if got[0].PagePath != "/" || got[1].PagePath != "/page/3" || got[1].EventSequence != 2 {
			t.Errorf("events %+v", got)
		}
		// The page could read the 202s: CORS let the responses through.
		statuses := mustRun(t, tb, chromedp.Poll[[]any](`trackStatuses.length >= 2 && trackStatuses`, chromedp.WithPollingTimeout(10*time.Second)))
		if fmt.Sprint(statuses) != "[202 202]" {
			t.Errorf("fetch outcomes %v, want [202 202]", statuses)
		}
	})
}

func TestTrackerScriptHeaders(t *testing.T) {
	e := startAPI(t)
	res := e.Do(t, "GET", "/tracker.js", "", nil, "Origin", "http://shop.example")
	want := map[string]string{
		"Content-Type":                "application/javascript; charset=utf-8",
		"Cache-Control":               "public, max-age=300",
		"Access-Control-Allow-Origin": "*",
	}
	if res.Status != 200 || !strings.Contains(string(res.Body), "sendBeacon") {
		t.Fatalf("GET /tracker.js: %d %.200s", res.Status, res.Body)
	}
	for k, v := range want {
		if got := res.Header.Get(k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	etag := res.Header.Get("ETag")
	if !strings.HasPrefix(etag, `"`) || len(etag) < 10 {
		t.Fatalf("ETag %q", etag)
	}

	t.Run("answers 304 to a matching If-None-Match", func(t *testing.T) {
		res := e.Do(t, "GET", "/tracker.js", "", nil, "If-None-Match", etag)
		if res.Status != 304 || len(res.Body) != 0 || res.Header.Get("ETag") != etag {
			t.Fatalf("got %d etag %q body %q", res.Status, res.Header.Get("ETag"), res.Body)
		}
	})
	t.Run("answers 200 to a stale If-None-Match", func(t *testing.T) {
		res := e.Do(t, "GET", "/tracker.js", "", nil, "If-None-Match", `"stale"`)
		if res.Status != 200 || len(res.Body) == 0 {
			t.Fatalf("got %d with %d bytes", res.Status, len(res.Body))
		}
	})
}
