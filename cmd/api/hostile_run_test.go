package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/eventq/eventq/internal/testenv"
)

// hostile builds request bytes for POST /api/track the way a hostile or broken client would:
// each request is a valid one with one to three things wrong in its body or headers.
type hostile struct {
	rnd     *rand.Rand
	siteKey string
}

var hostileStrings = []string{
	`\u0000`, "\xff", "\xc3(", "\xed\xa0\x80", `\ud800`, `\udfff\ud800`, "\u2028", `\"`, `\\`, "\t",
	"é", "😀", "\ufffd", "%00", "%ff", "' OR 1=1 --", "<script>", "\x7f", `\u001f`,
}

func (h *hostile) str(min, max int) string {
	var b strings.Builder
	n := min + h.rnd.Intn(max-min+1)
	for b.Len() < n {
		if h.rnd.Intn(4) == 0 {
			b.WriteString(hostileStrings[h.rnd.Intn(len(hostileStrings))])
		} else {
			b.WriteByte(byte('a' + h.rnd.Intn(26)))
		}
	}
	return b.String()
}

// value is a JSON value for a field: mostly a hostile string, sometimes another type.
func (h *hostile) value() string {
	switch h.rnd.Intn(12) {
	case 0:
		return "12"
	case 1:
		return "null"
	case 2:
		return `["a"]`
	case 3:
		return `{"a":1}`
	case 4:
		return "true"
	case 5:
		return `"` + strings.Repeat("x", 100+h.rnd.Intn(70000)) + `"`
	case 6:
		return "1e400"
	}
	return `"` + h.str(0, 40) + `"`
}

func (h *hostile) url() string {
	hosts := []string{"shop.example", strings.Repeat("h", 200+h.rnd.Intn(200)), strings.Repeat("é", 300), "[fe80::1%25eth0]",
		"[::1]:8080", "user:pw@shop.example", "xn--bcher-kva.example", "a%c3%a9.example", "shop.example:99999", h.str(1, 20)}
	paths := []string{"/", "/a/b?x=1", "/%00", "/é/😀", "/" + strings.Repeat("p", 3000), "/" + h.str(0, 30), ""}
	scheme := []string{"https://", "http://", "ftp://", "javascript:", ""}[h.rnd.Intn(5)%3]
	return scheme + hosts[h.rnd.Intn(len(hosts))] + paths[h.rnd.Intn(len(paths))]
}

func (h *hostile) event() string {
	fields := []string{
		`"type":"page_view"`, `"session_id":"s-1"`, fmt.Sprintf(`"url":%q`, "https://shop.example/a"), `"event_sequence":1`,
	}
	for i := 0; i < 1+h.rnd.Intn(3); i++ {
		switch h.rnd.Intn(8) {
		case 0, 1:
			k := []string{"type", "session_id", "audience_member_id", "url", "event_sequence"}[h.rnd.Intn(5)]
			fields = append(fields, fmt.Sprintf(`%q:%s`, k, h.value())) // repeated key: the last wins
		case 2, 3:
			u, _ := json.Marshal(h.url())
			fields = append(fields, `"url":`+string(u))
		case 4:
			fields = append(fields, `"url":"https://`+h.str(1, 300)+`/"`)
		case 5:
			fields = append(fields, `"event_sequence":`+[]string{"-1", "99999999999999999999", "1.5", `"7"`, "1e3"}[h.rnd.Intn(5)])
		case 6:
			fields = append(fields, `"audience_member_id":"`+h.str(0, 300)+`"`)
		case 7:
			fields = append(fields, `"`+h.str(1, 10)+`":`+h.value())
		}
	}
	h.rnd.Shuffle(len(fields), func(i, j int) { fields[i], fields[j] = fields[j], fields[i] })
	return "{" + strings.Join(fields, ",") + "}"
}

func (h *hostile) body() string {
	switch h.rnd.Intn(20) {
	case 0:
		return h.str(0, 200) // not JSON
	case 1:
		return strings.Repeat("[", 20000) + strings.Repeat("]", 20000)
	case 2:
		return `{"site_key":` + h.value() + `,"events":[` + h.event() + `]}`
	case 3:
		return fmt.Sprintf(`{"site_key":%q,"events":%s}`, h.siteKey, h.value())
	}
	events := make([]string, 1+h.rnd.Intn(3))
	if h.rnd.Intn(10) == 0 {
		events = make([]string, 95+h.rnd.Intn(10))
	}
	for i := range events {
		events[i] = h.event()
	}
	return fmt.Sprintf(`{"site_key":%q,"events":[%s]}`, h.siteKey, strings.Join(events, ","))
}

// request is one raw HTTP/1.1 request, with headers Go's client would refuse to send.
func (h *hostile) request() []byte {
	body := h.body()
	var b bytes.Buffer
	b.WriteString("POST /api/track HTTP/1.1\r\nHost: eventq\r\nConnection: close\r\n")
	if h.rnd.Intn(2) == 0 {
		cts := []string{"application/json", "text/plain", "multipart/form-data; boundary=x", "application/x-www-form-urlencoded", "", "\xff/\x00"}
		b.WriteString("Content-Type: " + cts[h.rnd.Intn(len(cts))] + "\r\n")
	}
	if h.rnd.Intn(2) == 0 {
		b.WriteString("User-Agent: " + strings.NewReplacer("\r", "", "\n", "").Replace(h.str(0, 1500)) + "\r\n")
	}
	if h.rnd.Intn(4) == 0 {
		b.WriteString("X-Forwarded-For: " + []string{"fe80::1%eth0", "1.2.3.4, 5.6.7.8", "garbage", "\x00"}[h.rnd.Intn(4)] + "\r\n")
	}
	fmt.Fprintf(&b, "Content-Length: %d\r\n\r\n%s", len(body), body)
	return b.Bytes()
}

// 2,400 hostile requests from 8 clients, while another tenant tracks valid events: no hostile
// request gets a 5xx, and every one of the other tenant's requests is stored and queued.
func TestHostileTrafficGetsNo5xxAndHarmsNoOtherTenant(t *testing.T) {
	e := startAPI(t, "TRUSTED_PROXIES=127.0.0.1")
	attacker, victim := testenv.MustTenant(t, e.DB, true), testenv.MustTenant(t, e.DB, true)
	const clients, perClient = 8, 300
	var (
		mu       sync.Mutex
		statuses = map[int]int{}
		failures []string
		wg       sync.WaitGroup
	)
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func(seed int64) {
			defer wg.Done()
			h := &hostile{rnd: rand.New(rand.NewSource(seed)), siteKey: attacker.SiteKey}
			for i := 0; i < perClient; i++ {
				req := h.request()
				status, err := testenv.SendRaw(e.Base, req)
				mu.Lock()
				statuses[status]++
				if err != nil || status >= 500 {
					failures = append(failures, fmt.Sprintf("%d %v: %.300q", status, err, req))
				}
				mu.Unlock()
			}
		}(int64(c + 1))
	}
	stop := make(chan struct{})
	victimDone := make(chan [2]int)
	go func() {
		sent, bad := 0, 0
		for i := 1; ; i++ {
			select {
			case <-stop:
				victimDone <- [2]int{sent, bad}
				return
			default:
			}
			body, _ := json.Marshal(map[string]any{"site_key": victim.SiteKey, "events": []any{pageView("v", i), pageView("v", i)}})
			res, err := http.Post(e.Base+"/api/track", "application/json", bytes.NewReader(body))
			if err != nil || res.StatusCode != 202 {
				bad++
			} else {
				sent += 2
			}
			if res != nil {
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
			}
		}
	}()
	wg.Wait()
	close(stop)
	v := <-victimDone

	codes := make([]int, 0, len(statuses))
	for s := range statuses {
		codes = append(codes, s)
	}
	sort.Ints(codes)
	var counts []string
	for _, s := range codes {
		counts = append(counts, fmt.Sprintf("%d: %d", s, statuses[s]))
	}
	t.Logf("hostile run on %s: %d requests; statuses %s; other tenant: %d events accepted, %d requests refused",
		testenv.Backend(), clients*perClient, strings.Join(counts, ", "), v[0], v[1])
	if len(failures) > 0 {
		t.Fatalf("%d hostile requests got a 5xx or no answer; first: %s", len(failures), failures[0])
	}
	if v[1] != 0 || v[0] == 0 {
		t.Fatalf("the other tenant had %d of its requests refused (%d events accepted)", v[1], v[0])
	}
	if rows, n := e.EventRows(t, victim), e.QueueLen(t, victim); rows != int64(v[0]) || n != int64(v[0]) {
		t.Fatalf("other tenant: %d rows and %d queued, want %d", rows, n, v[0])
	}
}
