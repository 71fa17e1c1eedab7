package e2e

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/eventq/eventq/internal/eventqueue"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/models"
)

// After an erasure through real processes, nothing of what was erased is anywhere a person
// can read it: not in `events list`, `events export`, the access export, the queue (before and
// after `queue rebuild`), nor in any log of the api, the worker or the CLI. The member's values
// are distinctive strings, so that a copy anywhere would be found.
func TestErasureLeavesNoTrace(t *testing.T) {
	s := startStack(t)
	sh := s.MustShop(t, "", true)
	secrets := []string{"ada.secret@example.org", "Ada Secretname", "ext-secret-42", "sess-secret-1", "secret-page", "UA-secret-agent"}
	call := func(method, path string, body any) (int, []byte) {
		t.Helper()
		var r io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			r = bytes.NewReader(b)
		}
		req, _ := http.NewRequest(method, s.Base+path, r)
		req.Header.Set("Authorization", "Bearer "+sh.Token)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json")
		res, err := http.DefaultClient.Do(req)
		testenv.Must(t, err)
		defer res.Body.Close()
		out, _ := io.ReadAll(res.Body)
		return res.StatusCode, out
	}
	status, body := call("POST", "/api/platform/members", map[string]any{"email": secrets[0], "name": secrets[1], "external_id": secrets[2]})
	if status != 201 {
		t.Fatalf("create member: %d %s", status, body)
	}
	track := func(member, session, path, agent string) {
		t.Helper()
		ev := map[string]any{"type": "page_view", "session_id": session, "url": "https://shop.example/" + path + "?q=1", "event_sequence": 1}
		if member != "" {
			ev["audience_member_id"] = member
		}
		b, _ := json.Marshal(map[string]any{"site_key": sh.SiteKey, "events": []any{ev}})
		req, _ := http.NewRequest("POST", s.Base+"/api/track", bytes.NewReader(b))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("User-Agent", agent)
		res, err := http.DefaultClient.Do(req)
		testenv.Must(t, err)
		res.Body.Close()
		if res.StatusCode != 202 {
			t.Fatalf("track: %d", res.StatusCode)
		}
	}
	track("external:"+secrets[2], secrets[3], secrets[4], secrets[5])
	track("", secrets[3], secrets[4], secrets[5]) // the same session, before logging in
	track("", "someone-else", "public", "Mozilla/5.0")
	testenv.Eventually(t, 10*time.Second, "three events queued", func() bool {
		n, _ := s.Queue.Len(t.Context(), sh.ID)
		return n == 3
	})
	if status, body := call("GET", "/api/platform/members/external:"+secrets[2]+"/data", nil); status != 200 || !strings.Contains(string(body), secrets[4]) {
		t.Fatalf("access export before: %d %s", status, body)
	}

	status, body = call("DELETE", "/api/platform/members/external:"+secrets[2], nil)
	var erasure struct {
		Data struct {
			ID     string `json:"id"`
			Status string `json:"status"`
		} `json:"data"`
	}
	if status != 202 || json.Unmarshal(body, &erasure) != nil {
		t.Fatalf("erase: %d %s", status, body)
	}
	testenv.Eventually(t, 30*time.Second, "the erasure done", func() bool {
		_, body := call("GET", "/api/platform/erasures/"+erasure.Data.ID, nil)
		return strings.Contains(string(body), `"status":"done"`)
	})
	track("external:"+secrets[2], "later", "later", "Mozilla/5.0") // naming the erased member: stored without it

	tenant := models.FormatID(sh.ID)
	var seen []string
	for _, args := range [][]string{{"events", "list", "--tenant", tenant}, {"events", "export", "--tenant", tenant}, {"queue", "rebuild", "--tenant", tenant}} {
		code, stdout, stderr := s.CLI(t, nil, args...)
		if code != 0 {
			t.Fatalf("eventq %v: exit %d: %s", args, code, stderr)
		}
		seen = append(seen, strings.Join(args, " ")+": "+stdout+stderr)
	}
	els, err := s.Redis.Client().LRange(t.Context(), eventqueue.Key(sh.ID), 0, -1).Result()
	testenv.Must(t, err)
	seen = append(seen, "queue after rebuild: "+strings.Join(els, "\n"), "api log: "+s.API.Log(), "worker log: "+s.Worker.Log())
	if !strings.Contains(seen[0], "someone-else") {
		t.Fatalf("events list lost the unrelated event: %s", seen[0])
	}
	for _, where := range seen {
		for _, secret := range secrets {
			if strings.Contains(where, secret) {
				t.Errorf("%q found in %s", secret, where)
			}
		}
	}
}
