package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/eventq/eventq/internal/eventqueue"
	"github.com/eventq/eventq/internal/testenv"
)

func TestQueueStats(t *testing.T) {
	e := newCLI(t)
	r := testenv.StartRedis(t)
	e.environ = append(e.environ, "REDIS_URL="+r.URL())
	tenant := e.mustTenant("Acme")
	base := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	for n := 1; n <= 3; n++ {
		e.insertEvent(tenant, n, base, nil)
	}
	held := e.insertEvent(tenant, 4, base, nil)
	e.db.Model(&held).Update("queue_pending", true)
	id := held.TenantID
	if err := eventqueue.New(r.Client()).Append(context.Background(), id, []byte(`{"a":1}`), []byte(`{"b":2}`)); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf(`{"tenant_id":%q,"length":2,"offset":0,"held_back":1}`, tenant)
	if got := e.MustRun("queue", "stats", "--tenant", tenant); string(got) != want {
		t.Fatalf("stats %s, want %s", got, want)
	}
	t.Run("fails for an unknown tenant", func(t *testing.T) {
		if code, _, stderr := e.Run("queue", "stats", "--tenant", "999999"); code == 0 || stderr == "" {
			t.Fatalf("exit %d, stderr %q", code, stderr)
		}
	})
}
