package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"gorm.io/gorm"

	"github.com/eventq/eventq/internal/clock"
	"github.com/eventq/eventq/internal/database"
	"github.com/eventq/eventq/internal/openapicheck"
	"github.com/eventq/eventq/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(openapicheck.Watching(m)) }

// cliEnv runs the CLI in-process against one fresh, migrated database and keeps its own
// connection to that database for assertions.
type cliEnv struct {
	environ []string
	db      *gorm.DB
	clock   clock.Clock // nil: the real one
}

func newCLI(t *testing.T) *cliEnv {
	t.Helper()
	return newCLIWithURL(t, testenv.DatabaseURL(t))
}

func newCLIWithURL(t *testing.T, databaseURL string) *cliEnv {
	t.Helper()
	db, err := database.Open(testenv.Unguarded(databaseURL))
	if err != nil {
		t.Fatalf("open %s: %v", databaseURL, err)
	}
	t.Cleanup(func() { database.Close(db) })
	return &cliEnv{environ: []string{"DATABASE_URL=" + databaseURL}, db: db}
}

// Run executes one CLI invocation and returns its exit code, stdout and stderr.
func (e *cliEnv) Run(args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	var clk clock.Clock = clock.Real{}
	if e.clock != nil {
		clk = e.clock
	}
	code = runAt(context.Background(), clk, args, e.environ, &out, &errOut)
	return code, out.String(), errOut.String()
}

// MustRun runs a command that must succeed: exit code 0, nothing on stderr, and exactly one
// JSON value on one line of stdout. It returns that value's raw bytes.
func (e *cliEnv) MustRun(t *testing.T, args ...string) json.RawMessage {
	t.Helper()
	code, stdout, stderr := e.Run(args...)
	if code != 0 || stderr != "" {
		t.Fatalf("eventq %s: exit %d, stderr %q, stdout %q; want exit 0 and empty stderr",
			strings.Join(args, " "), code, stderr, stdout)
	}
	line, ok := strings.CutSuffix(stdout, "\n")
	if !ok || strings.Contains(line, "\n") {
		t.Fatalf("eventq %s: stdout %q is not one line of JSON", strings.Join(args, " "), stdout)
	}
	if !json.Valid([]byte(line)) {
		t.Fatalf("eventq %s: stdout %q is not JSON", strings.Join(args, " "), stdout)
	}
	return json.RawMessage(line)
}

// MustObject runs a command that must succeed and print one JSON object whose keys are
// exactly wantKeys, in that order. It returns the object decoded.
func (e *cliEnv) MustObject(t *testing.T, wantKeys []string, args ...string) map[string]any {
	t.Helper()
	raw := e.MustRun(t, args...)
	return mustObjectKeys(t, raw, wantKeys)
}

// MustArray runs a command that must succeed and print one JSON array of objects, each with
// exactly wantKeys in that order. It returns the objects decoded.
func (e *cliEnv) MustArray(t *testing.T, wantKeys []string, args ...string) []map[string]any {
	t.Helper()
	raw := e.MustRun(t, args...)
	if !bytes.HasPrefix(raw, []byte("[")) {
		t.Fatalf("eventq %s: stdout %s is not a JSON array", strings.Join(args, " "), raw)
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		t.Fatalf("decode %s: %v", raw, err)
	}
	out := make([]map[string]any, len(items))
	for i, item := range items {
		out[i] = mustObjectKeys(t, item, wantKeys)
	}
	return out
}

// MustFail runs a command that must fail without side effects: exit code 1, a message on
// stderr, nothing on stdout, and every table unchanged. It returns stderr.
func (e *cliEnv) MustFail(t *testing.T, args ...string) string {
	t.Helper()
	before := e.snapshot(t)
	code, stdout, stderr := e.Run(args...)
	if code != 1 {
		t.Errorf("eventq %s: exit %d, want 1 (stderr %q)", strings.Join(args, " "), code, stderr)
	}
	if strings.TrimSpace(stderr) == "" {
		t.Errorf("eventq %s: no message on stderr", strings.Join(args, " "))
	}
	if stdout != "" {
		t.Errorf("eventq %s: stdout %q, want nothing", strings.Join(args, " "), stdout)
	}
	if after := e.snapshot(t); after != before {
		t.Errorf("eventq %s changed the database:\nbefore %s\nafter  %s", strings.Join(args, " "), before, after)
	}
	return stderr
}

// snapshot renders every row of every table, so that two snapshots differ if anything changed.
func (e *cliEnv) snapshot(t *testing.T) string {
	t.Helper()
	tables, err := e.db.Migrator().GetTables()
	if err != nil {
		t.Fatalf("list tables: %v", err)
	}
	var b strings.Builder
	for _, table := range tables {
		var rows []map[string]any
		if err := e.db.Table(table).Order("1").Find(&rows).Error; err != nil {
			t.Fatalf("read %s: %v", table, err)
		}
		js, err := json.Marshal(rows)
		if err != nil {
			t.Fatalf("encode %s: %v", table, err)
		}
		fmt.Fprintf(&b, "%s=%s\n", table, js)
	}
	return b.String()
}

// count returns the number of rows of model's table matching the optional condition.
func (e *cliEnv) count(t *testing.T, model any, where ...any) int64 {
	t.Helper()
	q := e.db.Model(model)
	if len(where) > 0 {
		q = q.Where(where[0], where[1:]...)
	}
	var n int64
	if err := q.Count(&n).Error; err != nil {
		t.Fatalf("count: %v", err)
	}
	return n
}

// mustObjectKeys checks that raw is a JSON object with exactly wantKeys in that order and
// decodes it.
func mustObjectKeys(t *testing.T, raw json.RawMessage, wantKeys []string) map[string]any {
	t.Helper()
	keys, err := objectKeys(raw)
	if err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
	if !reflect.DeepEqual(keys, wantKeys) {
		t.Fatalf("%s: keys %q, want exactly %q in that order", raw, keys, wantKeys)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("decode %s: %v", raw, err)
	}
	return m
}

// objectKeys lists the keys of the JSON object raw in document order.
func objectKeys(raw []byte) ([]string, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if tok != json.Delim('{') {
		return nil, fmt.Errorf("not a JSON object")
	}
	keys := []string{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		keys = append(keys, tok.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return nil, err
		}
	}
	return keys, nil
}

// str returns m[key] when it is a JSON string and fails otherwise (ids are strings).
func str(t *testing.T, m map[string]any, key string) string {
	t.Helper()
	s, ok := m[key].(string)
	if !ok {
		t.Fatalf("%q = %#v (%T), want a JSON string", key, m[key], m[key])
	}
	return s
}

// mustTenant creates a tenant through the CLI and returns its id.
func (e *cliEnv) mustTenant(t *testing.T, name string) string {
	t.Helper()
	out := e.MustObject(t, []string{"id", "name", "site_key", "psp_account_id"}, "tenant", "create", "--name", name)
	return str(t, out, "id")
}

func TestMigrate(t *testing.T) {
	t.Run("is idempotent on a fresh database", func(t *testing.T) {
		e := newCLIWithURL(t, testenv.EmptyDatabaseURL(t))
		for i := 1; i <= 2; i++ {
			if got := e.MustRun(t, "migrate"); string(got) != `{"migrated":true}` {
				t.Errorf("migrate #%d printed %s, want {\"migrated\":true}", i, got)
			}
		}
		for _, table := range []string{"tenants", "personal_access_tokens", "features", "audience_members", "products", "tracked_events"} {
			if !e.db.Migrator().HasTable(table) {
				t.Errorf("table %s missing after migrate", table)
			}
		}
		e.mustTenant(t, "after migrate")
	})

	t.Run("creates the sqlite directory", func(t *testing.T) {
		if testenv.Backend() != "sqlite" {
			t.Skip("sqlite only")
		}
		url := "sqlite://" + filepath.Join(t.TempDir(), "nested", "dir", "x.db")
		e := &cliEnv{environ: []string{"DATABASE_URL=" + url}}
		if got := e.MustRun(t, "migrate"); string(got) != `{"migrated":true}` {
			t.Errorf("migrate printed %s", got)
		}
	})
}

func TestInvalidConfiguration(t *testing.T) {
	for _, tc := range []struct {
		name, env, wantVar string
	}{
		{"fails on a mysql DATABASE_URL", "DATABASE_URL=mysql://u@db/x", "DATABASE_URL"},
		{"fails on an http REDIS_URL", "REDIS_URL=http://x", "REDIS_URL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := &cliEnv{environ: []string{tc.env}}
			for _, args := range [][]string{{"migrate"}, {"tenant", "create", "--name", "x"}} {
				code, stdout, stderr := e.Run(args...)
				if code != 1 || stdout != "" || !strings.Contains(stderr, tc.wantVar) {
					t.Errorf("eventq %s: exit %d, stdout %q, stderr %q; want exit 1, no stdout, stderr naming %s",
						strings.Join(args, " "), code, stdout, stderr, tc.wantVar)
				}
			}
		})
	}
}

func TestUnknownCommandFails(t *testing.T) {
	e := newCLI(t)
	e.MustFail(t, "frobnicate")
	e.MustFail(t, "tenant", "create", "--name", "x", "--no-such-flag")
}

// A command the CLI does not have, at the top or in a group, fails naming it and pointing to
// --help (a group's default was its help and exit status 0, which a script takes for success).
func TestUnknownCommandsFail(t *testing.T) {
	for _, args := range [][]string{{"bogus"}, {"tenant", "lst"}, {"events", "lsit", "--tenant", "1"}} {
		var out, errOut bytes.Buffer
		code := run(context.Background(), args, nil, &out, &errOut)
		want := fmt.Sprintf("unknown command %q", args[len(args)-1])
		if args[0] == "events" {
			want = `unknown command "lsit"`
		}
		if code == 0 || !strings.Contains(errOut.String(), want) || !strings.Contains(errOut.String(), "--help' for its commands") || out.Len() != 0 {
			t.Errorf("eventq %v: exit %d, stdout %q, stderr %q", args, code, out.String(), errOut.String())
		}
	}
	var out bytes.Buffer
	if code := run(context.Background(), []string{"tenant"}, nil, &out, &out); code != 0 || !strings.Contains(out.String(), "Available Commands") {
		t.Errorf("eventq tenant: exit %d, %q; want its help", code, out.String())
	}
}
