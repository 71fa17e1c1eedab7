//go:build chaos

package e2e

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/eventq/eventq/docs"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/models"
)

// routeFuzz builds hostile requests for every operation of docs/openapi.yaml: ids in other
// spellings and sizes in every path parameter, forged cursors, invalid bytes and odd numbers
// in every query parameter, stacked and unknown content codings, and bodies that are not what
// the route takes, sent with a valid token (or the site key) so that they reach the handlers.
type routeFuzz struct {
	rnd    *rand.Rand
	ops    []fuzzOp
	token  string
	admin  string
	ids    []string // real ids of the tenant's resources, so that some requests find one
	siteKy string
}

type fuzzOp struct {
	method, path string
	query        []string
	body         bool
}

var fuzzIDs = []string{"0", "00", "01", "001", "+1", "-1", "1.0", "1e3", "0x1", " 1", "1%20", "%2B1", "%00", "%FF", "%C3%28",
	"9223372036854775807", "9223372036854775808", "18446744073709551615", "18446744073709551616",
	"99999999999999999999999999999999", strings.Repeat("9", 400), "external:", "external:%00", "external:%FF",
	"external:" + strings.Repeat("x", 300), "external%3A1", "..", "%2e%2e", "%2F", "a%2Fb"}

var fuzzValues = []string{"", "%00", "%FF", "%C3%28", "%ED%A0%80", "-1", "0", "1", "+1", "1.5", "1e3", "1e400", "0x10",
	"9223372036854775808", "18446744073709551616", strings.Repeat("9", 300), "true",
	// In range, but past what a Lua number (a double) holds exactly or prints without an exponent.
	"9223372036854775807", "9007199254740993", "99999999999999990", "100000000000000000", "100000000000000", "yes", "%20", "a%00b", "%E2%80%8B",
	"null", "[]", "%5B%5D", strings.Repeat("%FF", 200)}

func (f *routeFuzz) cursor() string {
	raw := []string{`{"id":9223372036854775808,"_pointsToNextItems":true}`, `{"id":-1,"_pointsToNextItems":false}`,
		`{"id":"x","_pointsToNextItems":true}`, `{"id":1e400,"_pointsToNextItems":true}`, `{"id":1}`, "\x00\xff", `[]`, `null`}
	c := base64.RawURLEncoding.EncodeToString([]byte(raw[f.rnd.Intn(len(raw))]))
	switch f.rnd.Intn(4) {
	case 0:
		return c + "%00"
	case 1:
		return "%FF" + c
	}
	return c
}

func (f *routeFuzz) pathValue(name string) string {
	switch f.rnd.Intn(4) {
	case 0:
		if name != "token" { // a real one would revoke the token the requests carry
			return f.ids[f.rnd.Intn(len(f.ids))]
		}
	case 1:
		if name == "feature" {
			return []string{"UseQueueEvents", "AnonymizeIp", "useQueueEvents", "%00"}[f.rnd.Intn(4)]
		}
	}
	return fuzzIDs[f.rnd.Intn(len(fuzzIDs))]
}

func (f *routeFuzz) request() ([]byte, string) {
	op := f.ops[f.rnd.Intn(len(f.ops))]
	path := regexp.MustCompile(`\{(\w+)\}`).ReplaceAllStringFunc(op.path, func(p string) string { return f.pathValue(p[1 : len(p)-1]) })
	var q []string
	for _, name := range op.query {
		if f.rnd.Intn(2) == 0 {
			continue
		}
		v := fuzzValues[f.rnd.Intn(len(fuzzValues))]
		if name == "cursor" && f.rnd.Intn(2) == 0 {
			v = f.cursor()
		}
		q = append(q, name+"="+v)
		if f.rnd.Intn(6) == 0 { // repeated
			q = append(q, name+"="+fuzzValues[f.rnd.Intn(len(fuzzValues))])
		}
	}
	target := path
	if len(q) > 0 {
		target += "?" + strings.Join(q, "&")
	}
	var body []byte
	if op.body || f.rnd.Intn(5) == 0 {
		body = []byte([]string{`{}`, `{"email":"a@b.io","external_id":"\u0000"}`, `{"name":"\udfff","amount":1e400,"currency":"usd"}`,
			`{"abilities":[]}`, `{"abilities":null}`, `{"acks":[` + strings.Repeat(`"x",`, 5000) + `"x"]}`,
			`{"site_key":"` + f.siteKy + `","events":[{"type":"page_view","session_id":"s","url":"https://x.io/","event_sequence":1,"audience_member_id":"external:\u0000"}]}`,
			`{"allowed_hostnames":[` + strings.Repeat(`"a.io",`, 3000) + `"a.io"]}`, "\xff\xfe", `[`, `{"active":"yes"}`}[f.rnd.Intn(11)])
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: eventq\r\nConnection: close\r\n", op.method, target)
	// Mostly the credential the route takes, so that the request reaches its handler.
	token, other := f.token, f.admin
	if strings.HasPrefix(op.path, "/api/admin") {
		token, other = other, token
	}
	switch n := f.rnd.Intn(10); {
	case n < 8:
		fmt.Fprintf(&b, "Authorization: Bearer %s\r\n", token)
	case n == 8:
		fmt.Fprintf(&b, "Authorization: Bearer %s\r\n", other)
	}
	if f.rnd.Intn(2) == 0 {
		b.WriteString("Content-Type: application/json\r\n")
	}
	if len(body) > 0 && f.rnd.Intn(3) == 0 {
		codings := []string{"gzip", "gzip, gzip", "gzip, gzip, gzip", strings.TrimSuffix(strings.Repeat("gzip,", 300), ","), "compress", "identity, gzip", "br, zstd"}
		coding := codings[f.rnd.Intn(len(codings))]
		enc := body
		for range strings.Count(coding, "gzip") {
			var zb bytes.Buffer
			zw := gzip.NewWriter(&zb)
			zw.Write(enc)
			zw.Close()
			enc = zb.Bytes()
		}
		body = enc
		fmt.Fprintf(&b, "Content-Encoding: %s\r\n", coding)
	}
	fmt.Fprintf(&b, "Content-Length: %d\r\n\r\n", len(body))
	b.Write(body)
	return b.Bytes(), op.method + " " + op.path
}

// TestChaosHostileRequestsOnEveryRoute sends 4,000 hostile requests spread over every
// operation of docs/openapi.yaml, from 8 clients: none is answered 5xx or left unanswered, and
// the tenant's data is unchanged (its member, product and token still as they were).
func TestChaosHostileRequestsOnEveryRoute(t *testing.T) {
	admin := "adm_chaos_0123456789abcdef0123456789abcdef"
	s := startStack(t, withEnv("ADMIN_API_TOKENS="+admin))
	sh := s.MustShop(t, "", true)
	doc, err := openapi3.NewLoader().LoadFromData(docs.OpenAPI)
	testenv.Must(t, err)
	var ops []fuzzOp
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			fo := fuzzOp{method: method, path: path, body: op.RequestBody != nil}
			for _, p := range append(item.Parameters, op.Parameters...) {
				if p.Value.In == "query" {
					fo.query = append(fo.query, p.Value.Name)
				}
			}
			ops = append(ops, fo)
		}
	}
	sort.Slice(ops, func(i, j int) bool { return ops[i].method+ops[i].path < ops[j].method+ops[j].path })
	ids := []string{models.FormatID(sh.Member.ID), models.FormatID(sh.Product.ID), models.FormatID(sh.ID), "external:u-1"}
	const clients, perClient = 8, 500
	var (
		mu       sync.Mutex
		byStatus = map[int]int{}
		failures []string
		wg       sync.WaitGroup
	)
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func(seed int64) {
			defer wg.Done()
			f := &routeFuzz{rnd: rand.New(rand.NewSource(seed)), ops: ops, token: sh.Token, admin: admin, ids: ids, siteKy: sh.SiteKey}
			for i := 0; i < perClient; i++ {
				req, op := f.request()
				status, err := testenv.SendRaw(s.Base, req)
				mu.Lock()
				byStatus[status]++
				if err != nil || status >= 500 {
					failures = append(failures, fmt.Sprintf("%s: %d %v: %.400q", op, status, err, req))
				}
				mu.Unlock()
			}
		}(int64(c + 1))
	}
	wg.Wait()
	var counts []string
	for status, n := range byStatus {
		counts = append(counts, fmt.Sprintf("%d: %d", status, n))
	}
	sort.Strings(counts)
	t.Logf("hostile requests over %d operations on %s: %d sent; statuses %s", len(ops), testenv.Backend(), clients*perClient, strings.Join(counts, ", "))
	if len(failures) > 0 {
		t.Fatalf("%d requests got a 5xx or no answer; the first ones:\n%s", len(failures), strings.Join(failures[:min(5, len(failures))], "\n"))
	}
	// The tenant's token still works, and its member is still there (no request of another
	// spelling of its id reached it as a change; some erasures may have taken it legitimately).
	req, _ := http.NewRequestWithContext(context.Background(), "GET", s.Base+"/api/platform/events", nil)
	req.Header.Set("Authorization", "Bearer "+sh.Token)
	res, err := http.DefaultClient.Do(req)
	testenv.Must(t, err)
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != 200 && res.StatusCode != 401 { // a DELETE /api/admin/tokens/{id} may have revoked it
		t.Fatalf("the tenant's read after the run: %d", res.StatusCode)
	}
}
