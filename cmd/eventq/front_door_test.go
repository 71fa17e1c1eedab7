package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/eventq/eventq/internal/openapicheck"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/models"
)

var fullTenantKeys = []string{"id", "name", "site_key", "psp_account_id", "allowed_hostnames", "redact_query_params", "features", "created_at"}

func TestTenantUpdateAndRotateSiteKey(t *testing.T) {
	e := newCLI(t)
	id := str(t, e.MustObject(t, tenantKeys, "tenant", "create", "--name", "Acme"), "id")
	raw := e.MustRun(t, "tenant", "update", "--id", id, "--allowed-hostnames", "Shop.Example, *.blog.example", "--redact-query-params", "email,token")
	out := mustObjectKeys(t, raw, fullTenantKeys)
	if !strings.Contains(string(raw), `"allowed_hostnames":["shop.example","blog.example"],"redact_query_params":["email","token"],"features":{"UseQueueEvents":false,"AnonymizeIp":false}`) {
		t.Fatalf("update: %s", raw)
	}
	raw = e.MustRun(t, "tenant", "update", "--id", id, "--allowed-hostnames", "")
	if !strings.Contains(string(raw), `"allowed_hostnames":[],"redact_query_params":["email","token"]`) {
		t.Fatalf("clearing one list: %s", raw)
	}
	rotated := mustObjectKeys(t, e.MustRun(t, "tenant", "rotate-site-key", "--id", id), fullTenantKeys)
	if str(t, rotated, "site_key") == str(t, out, "site_key") || !strings.HasPrefix(str(t, rotated, "site_key"), "site_") {
		t.Fatalf("site key %s after rotating %s", str(t, rotated, "site_key"), str(t, out, "site_key"))
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"tenant", "update", "--id", id, "--allowed-hostnames", "not a host"}, "--allowed-hostnames: The allowed hostnames.0 field format is invalid."},
		{[]string{"tenant", "update", "--id", id}, "give --allowed-hostnames or --redact-query-params"},
		{[]string{"tenant", "update", "--id", "999999", "--redact-query-params", "a"}, "tenant 999999 not found"},
		{[]string{"tenant", "rotate-site-key", "--id", "x"}, "must be a tenant id"},
	} {
		if stderr := e.MustFail(t, c.args...); !strings.Contains(stderr, c.want) {
			t.Errorf("%v: stderr %q, want %q", c.args, stderr, c.want)
		}
	}
	activated := e.MustObject(t, []string{"feature", "tenant_id", "active"}, "feature", "activate", "AnonymizeIp", "--tenant", id)
	if activated["active"] != true {
		t.Fatalf("%v", activated)
	}
	if stderr := e.MustFail(t, "feature", "activate", "Nope", "--tenant", id); !strings.Contains(stderr, `unknown feature "Nope"`) {
		t.Fatalf("stderr %q", stderr)
	}
}

// What the CLI creates shows over HTTP, and what HTTP creates shows in the CLI: one service
// per resource behind both, on one database, with a real api process.
func TestCLIAndHTTPSeeTheSameResources(t *testing.T) {
	bins, cleanup, err := testenv.BuildBinaries("github.com/eventq/eventq/cmd/api")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cleanup)
	r := testenv.StartRedis(t)
	dbURL := testenv.DatabaseURL(t)
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	base := "http://" + addr
	openapicheck.API(base)
	const admin = "adm_cli_http_0123456789abcdef0123"
	testenv.NewProcess(t, filepath.Join(bins, "api"), append(append(os.Environ(), testenv.NoRateLimits...),
		"HTTP_ADDR="+addr, "METRICS_ADDR=off", "DATABASE_URL="+dbURL, "REDIS_URL="+r.URL(), "ADMIN_API_TOKENS="+admin)).Start()
	testenv.WaitHTTP(t, base+"/healthz", 20*time.Second)
	e := newCLIWithURL(t, dbURL)
	e.environ = append(e.environ, "REDIS_URL="+r.URL())
	call := func(method, path, token string, body any) (int, []byte) {
		t.Helper()
		b, _ := json.Marshal(body)
		req, _ := http.NewRequest(method, base+path, bytes.NewReader(b))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		out, _ := io.ReadAll(res.Body)
		return res.StatusCode, out
	}

	// CLI → HTTP.
	tn := e.MustObject(t, tenantKeys, "tenant", "create", "--name", "Made by the CLI", "--psp-account", "acct_cli")
	id := str(t, tn, "id")
	token := str(t, e.MustObject(t, tokenKeys, "token", "create", "--tenant", id), "token")
	member := str(t, e.MustObject(t, []string{"id", "email"}, "member", "create", "--tenant", id, "--email", "ada@example.com", "--external-id", "site-1"), "id")
	product := str(t, e.MustObject(t, []string{"id", "name", "amount", "currency"}, "product", "create", "--tenant", id, "--name", "Course", "--amount", "1999", "--currency", "USD"), "id")
	if status, body := call("GET", "/api/admin/tenants/"+id, admin, nil); status != 200 || !strings.Contains(string(body), `"name":"Made by the CLI","site_key":"`+str(t, tn, "site_key")+`","psp_account_id":"acct_cli"`) {
		t.Fatalf("tenant over HTTP: %d %s", status, body)
	}
	if status, body := call("GET", "/api/platform/members/external:site-1", token, nil); status != 200 || !strings.Contains(string(body), `"id":"`+member+`","external_id":"site-1","email":"ada@example.com"`) {
		t.Fatalf("member over HTTP: %d %s", status, body)
	}
	if status, body := call("GET", "/api/platform/products/"+product, token, nil); status != 200 || !strings.Contains(string(body), `"name":"Course","amount":1999,"currency":"usd","active":true`) {
		t.Fatalf("product over HTTP: %d %s", status, body)
	}

	// HTTP → CLI.
	status, body := call("POST", "/api/admin/tenants", admin, map[string]any{"name": "Made over HTTP"})
	var created struct {
		Data struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if status != 201 || json.Unmarshal(body, &created) != nil {
		t.Fatalf("%d %s", status, body)
	}
	status, body = call("POST", "/api/admin/tenants/"+created.Data.ID+"/tokens", admin, map[string]any{"abilities": []string{"members:write"}})
	var tok struct {
		Data struct {
			Token string `json:"token"`
		} `json:"data"`
	}
	if status != 201 || json.Unmarshal(body, &tok) != nil {
		t.Fatalf("%d %s", status, body)
	}
	if status, body := call("POST", "/api/platform/members", tok.Data.Token, map[string]any{"email": "bob@example.com"}); status != 201 {
		t.Fatalf("%d %s", status, body)
	}
	if status, body := call("PUT", "/api/admin/tenants/"+created.Data.ID+"/features/UseQueueEvents", admin, map[string]any{"active": true}); status != 200 {
		t.Fatalf("%d %s", status, body)
	}
	stats := e.MustObject(t, []string{"tenant_id", "length", "offset", "held_back", "leased", "dead_letters"}, "queue", "stats", "--tenant", created.Data.ID)
	if str(t, stats, "tenant_id") != created.Data.ID {
		t.Fatalf("%v", stats)
	}
	// The CLI's token for the HTTP tenant works over HTTP; the HTTP tenant's features show in the CLI's update.
	raw := e.MustRun(t, "tenant", "update", "--id", created.Data.ID, "--redact-query-params", "email")
	if !strings.Contains(string(raw), `"name":"Made over HTTP"`) || !strings.Contains(string(raw), `"features":{"UseQueueEvents":true,"AnonymizeIp":false}`) {
		t.Fatalf("HTTP tenant in the CLI: %s", raw)
	}
	// The api records a token's use in the background (last_used_at): MustFail compares the
	// database before and after the command, so the write must have landed first (on a loaded
	// machine it landed during the command once).
	testenv.Eventually(t, 10*time.Second, "the api recorded the HTTP tenant's token's use", func() bool {
		var unrecorded int64
		return e.db.Model(&models.PersonalAccessToken{}).Where("last_used_at IS NULL").Count(&unrecorded).Error == nil && unrecorded == 0
	})
	if stderr := e.MustFail(t, "tenant", "create", "--name", "Copy", "--psp-account", "acct_cli"); !strings.Contains(stderr, "--psp-account: The psp account id has already been taken.") {
		t.Fatalf("stderr %q", stderr)
	}
}

// member erase does the erasure itself and prints it once done: the member's events and
// those of its sessions deleted, the rest kept; an unknown member is an error naming it.
func TestMemberErase(t *testing.T) {
	e := newCLI(t)
	r := testenv.StartRedis(t)
	e.environ = append(e.environ, "REDIS_URL="+r.URL())
	tenant := str(t, e.MustObject(t, tenantKeys, "tenant", "create", "--name", "Acme"), "id")
	member := str(t, e.MustObject(t, []string{"id", "email"}, "member", "create", "--tenant", tenant, "--email", "ada@example.com", "--external-id", "u-1"), "id")
	tid, _ := models.ParseID(tenant)
	for i, who := range []string{member, "external:u-1", "", "someone"} {
		ev := models.TrackedEvent{ID: fmt.Sprintf("01a20000-0000-7000-8000-%012d", i), TenantID: tid, Type: "page_view",
			SessionID: fmt.Sprintf("s-%d", i%3), URL: "https://x.io/", PageHostname: "x.io", PagePath: "/", CreatedAt: time.Now().UTC()}
		if who != "" {
			ev.AudienceMemberID = &who
		}
		testenv.Must(t, e.db.Create(&ev).Error) // sessions s-0 (member), s-1 (external:u-1), s-2 (anonymous), s-0 (someone)
	}
	out := e.MustObject(t, []string{"id", "member_id", "status", "requested_at", "completed_at", "events_deleted", "events_redacted"},
		"member", "erase", "--tenant", tenant, "--member", "external:u-1")
	if out["status"] != "done" || out["member_id"] != member || out["events_deleted"] != float64(3) || out["events_redacted"] != float64(0) {
		t.Fatalf("%v", out)
	}
	var left []models.TrackedEvent
	testenv.Must(t, e.db.Where("tenant_id = ?", tid).Find(&left).Error)
	if len(left) != 1 || left[0].SessionID != "s-2" {
		t.Fatalf("left %+v, want the anonymous event of another session", left)
	}
	if stderr := e.MustFail(t, "member", "erase", "--tenant", tenant, "--member", member); !strings.Contains(stderr, "not found") {
		t.Fatalf("erasing twice: %q", stderr)
	}
}
