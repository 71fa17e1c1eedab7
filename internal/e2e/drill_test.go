//go:build chaos

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/eventq/eventq/internal/database"
	"github.com/eventq/eventq/internal/eventqueue"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/models"
)

// The backup and restore drill of docs/operations.md: back up Postgres (pg_dump), lose the
// database and Redis, restore the dump, run `eventq queue rebuild --all`. What comes back is
// what the procedure says: every event stored at the backup, queued from the front recorded
// then (so events trimmed after the backup are delivered again); what was tracked after the
// backup is lost. Tracking works again at once.
func TestChaosBackupAndRestoreDrill(t *testing.T) {
	testenv.OnOneDatabase(t) // a Postgres of its own, whatever the suite's database
	pg, db, url := testenv.DurablePostgres(t, "drill")
	s := startStack(t, onDatabase(db, url))
	sh := s.MustShop(t, "acct_drill", true)
	tn := sh.Tenant

	track := func(n int) []string {
		t.Helper()
		var ids []string
		for i := 0; i < n; i++ {
			body, _ := json.Marshal(map[string]any{"site_key": tn.SiteKey, "events": []any{map[string]any{
				"type": "page_view", "session_id": "drill", "url": "https://shop.example/p", "event_sequence": i}}})
			res, err := http.Post(s.Base+"/api/track", "application/json", bytes.NewReader(body))
			testenv.Must(t, err)
			var out struct {
				Data struct {
					IDs []string `json:"ids"`
				} `json:"data"`
			}
			json.NewDecoder(res.Body).Decode(&out)
			res.Body.Close()
			if res.StatusCode != 202 {
				t.Fatalf("track: %d", res.StatusCode)
			}
			ids = append(ids, out.Data.IDs...)
		}
		return ids
	}
	trim := func(n int) {
		t.Helper()
		req, _ := http.NewRequest("DELETE", fmt.Sprintf("%s/api/platform/events?count=%d", s.Base, n), nil)
		req.Header.Set("Authorization", "Bearer "+tn.Token)
		res, err := http.DefaultClient.Do(req)
		testenv.Must(t, err)
		res.Body.Close()
		if res.StatusCode != 204 {
			t.Fatalf("trim: %d", res.StatusCode)
		}
	}
	queued := func() []string {
		t.Helper()
		all, err := s.Redis.Client().LRange(context.Background(), eventqueue.Key(tn.ID), 0, -1).Result()
		testenv.Must(t, err)
		var ids []string
		for _, raw := range all {
			var ev models.QueueEvent
			testenv.Must(t, json.Unmarshal([]byte(raw), &ev))
			ids = append(ids, ev.ID)
		}
		return ids
	}

	// The api records each trim's front in the database a moment after the trim; a backup
	// holds the fronts recorded by then.
	recorded := func(front int64) {
		t.Helper()
		testenv.Eventually(t, 10*1e9, "the trim is recorded", func() bool {
			var f models.QueueFront
			return db.Where("tenant_id = ?", tn.ID).Take(&f).Error == nil && f.Front == front
		})
	}
	before := track(30)
	trim(10)
	recorded(10)
	dump := filepath.Join(t.TempDir(), "eventq.dump")
	// The backup: the documented command.
	if out, err := exec.Command(pgTool(t, "pg_dump"), "--format=custom", "--file="+dump, url).CombinedOutput(); err != nil {
		t.Fatalf("pg_dump: %v: %s", err, out)
	}
	after := track(20)
	trim(5)
	recorded(15)

	// The disaster: the database and Redis are lost.
	s.API.Stop()
	s.Worker.Stop()
	database.Close(db)
	admin := pg.URL("postgres")
	psql := func(sql string) {
		t.Helper()
		if out, err := exec.Command(pgTool(t, "psql"), "-v", "ON_ERROR_STOP=1", "-d", admin, "-c", sql).CombinedOutput(); err != nil {
			t.Fatalf("psql %s: %v: %s", sql, err, out)
		}
	}
	psql(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = 'drill' AND pid <> pg_backend_pid()`)
	psql(`DROP DATABASE drill`)
	s.Redis.Wipe()

	// The restore: an empty database, the dump, the migrations, the processes, the queues.
	psql(`CREATE DATABASE drill`)
	if out, err := exec.Command(pgTool(t, "pg_restore"), "--no-owner", "--dbname="+url, dump).CombinedOutput(); err != nil {
		t.Fatalf("pg_restore: %v: %s", err, out)
	}
	if code, out, errOut := s.CLI(t, nil, "migrate"); code != 0 {
		t.Fatalf("eventq migrate: %d %s %s", code, out, errOut)
	}
	s.API.Start()
	testenv.WaitHTTP(t, s.Base+"/healthz", 20*1e9)
	s.Worker.Start()
	code, out, errOut := s.CLI(t, nil, "queue", "rebuild", "--all")
	if code != 0 {
		t.Fatalf("eventq queue rebuild: %d %s %s", code, out, errOut)
	}
	t.Logf("rebuild: %s", strings.TrimSpace(out))

	db, err := database.Open(url)
	testenv.Must(t, err)
	t.Cleanup(func() { database.Close(db) })
	var stored []string
	testenv.Must(t, db.Model(&models.TrackedEvent{}).Where("tenant_id = ?", tn.ID).Order("created_at, id").Pluck("id", &stored).Error)
	if !slices.Equal(stored, before) {
		t.Fatalf("stored after the restore: %d events, want the %d of the backup", len(stored), len(before))
	}
	if got := queued(); !slices.Equal(got, before[10:]) {
		t.Fatalf("queued after the rebuild: %d events, want the %d untrimmed at the backup", len(got), len(before)-10)
	}
	offset, err := s.Queue.Offset(context.Background(), tn.ID)
	testenv.Must(t, err)
	if offset != 10 {
		t.Fatalf("Queue-Offset %d after the rebuild, want 10 (the front recorded at the backup)", offset)
	}
	for _, id := range after {
		if slices.Contains(stored, id) {
			t.Fatalf("an event tracked after the backup came back: %s", id)
		}
	}
	again := track(1)
	testenv.Eventually(t, 30*1e9, "a new event is queued after the restored ones", func() bool {
		got := queued()
		return len(got) == 21 && got[20] == again[0]
	})
	t.Logf("drill: %d events stored at the backup came back (%d queued, offset 10; the 5 trimmed after the backup are delivered again); %d tracked after it are lost, as documented",
		len(before), len(before)-10, len(after))
}

// pgTool finds a Postgres client program: on PATH, else in the server's directory (Debian
// keeps those off PATH).
func pgTool(t *testing.T, name string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/" + name)
	if len(matches) == 0 {
		t.Fatalf("%s not found: install the Debian package postgresql-client", name)
	}
	return matches[len(matches)-1]
}
