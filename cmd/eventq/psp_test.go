package main

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/eventq/eventq/internal/psp"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/jobs"
)

var reconcileKeys = []string{"checked", "enqueued"}

// reconcileEnv is a CLI with a Redis and a fake provider, and a paid session of s on its
// account whose checkout.session.completed delivery never came.
func newReconcileEnv(t *testing.T) (*cliEnv, *testenv.FakePSP, *asynq.Inspector, shop, string) {
	t.Helper()
	e := newCLI(t)
	r := testenv.StartRedis(t)
	fake := testenv.StartFakePSP(t)
	e.environ = append(e.environ, "REDIS_URL="+r.URL(), "PSP_SECRET_KEY=sk_test_cli", "PSP_API_BASE="+fake.URL)
	s := e.mustShop(t, "acct_cli")
	cs := fake.AddSession("acct_cli", psp.SessionObject{
		AmountTotal: 1999, Currency: "eur", Mode: "payment", PaymentStatus: "unpaid", Status: "open",
		Metadata: map[string]string{"tenant_id": s.tenant, "audience_member_id": s.member, "product_id": s.product},
	})
	id, _ := fake.Complete(cs.ID)
	return e, fake, asynq.NewInspectorFromRedisClient(r.Client()), s, id
}

func TestPSPReconcile(t *testing.T) {
	t.Run("queues a missed event once, as its delivery would have", func(t *testing.T) {
		e, fake, tasks, _, id := newReconcileEnv(t)
		out := e.MustObject(t, reconcileKeys, "psp", "reconcile")
		if out["checked"] != float64(1) || out["enqueued"] != float64(1) {
			t.Errorf("first run printed %v, want checked 1, enqueued 1", out)
		}
		info, err := tasks.GetTaskInfo(jobs.TaskQueue, id)
		if err != nil || info.Type != "psp:"+"checkout.session.completed" {
			t.Fatalf("task %s: %v %v, want the webhook's fulfilment task under the event id", id, info, err)
		}
		if raw := e.MustRun(t, "psp", "reconcile"); string(raw) != `{"checked":1,"enqueued":0}` {
			t.Errorf("second run printed %s, want {\"checked\":1,\"enqueued\":0}", raw)
		}
		// Both runs listed the platform and the connected account, 72 hours back by default.
		var accounts []string
		for _, c := range fake.Calls() {
			if c.Path == "/v1/events" {
				accounts = append(accounts, c.Account)
				gte := c.Form.Get("created[gte]")
				if want := time.Now().Add(-72 * time.Hour).Unix(); gte == "" || absDiff(gte, want) > 60 {
					t.Errorf("created[gte] %s, want about %d", gte, want)
				}
			}
		}
		if strings.Join(accounts, ",") != ",acct_cli,,acct_cli" {
			t.Errorf("listed accounts %q, want the platform and acct_cli, twice", accounts)
		}
	})

	t.Run("honours --since and --tenant", func(t *testing.T) {
		e, fake, _, s, _ := newReconcileEnv(t)
		other := e.mustShop(t, "acct_other")
		out := e.MustObject(t, reconcileKeys, "psp", "reconcile", "--since", "1h", "--tenant", other.tenant)
		if out["checked"] != float64(0) || out["enqueued"] != float64(0) {
			t.Errorf("run for another tenant printed %v, want nothing", out)
		}
		out = e.MustObject(t, reconcileKeys, "psp", "reconcile", "--since", "1h", "--tenant", s.tenant)
		if out["checked"] != float64(1) || out["enqueued"] != float64(1) {
			t.Errorf("run for the tenant printed %v, want its event queued", out)
		}
		calls := fake.Calls()
		last := calls[len(calls)-1]
		if last.Account != "acct_cli" || absDiff(last.Form.Get("created[gte]"), time.Now().Add(-time.Hour).Unix()) > 60 {
			t.Errorf("last list call %+v, want acct_cli an hour back", last)
		}
	})

	t.Run("fails without a provider key, naming PSP_SECRET_KEY", func(t *testing.T) {
		e := newCLI(t)
		e.mustShop(t, "acct_cli")
		if stderr := e.MustFail(t, "psp", "reconcile"); !strings.Contains(stderr, "PSP_SECRET_KEY") {
			t.Errorf("stderr %q does not name PSP_SECRET_KEY", stderr)
		}
	})

	t.Run("fails when the provider fails", func(t *testing.T) {
		e, fake, _, _, _ := newReconcileEnv(t)
		fake.SetDown(true)
		if stderr := e.MustFail(t, "psp", "reconcile"); !strings.Contains(stderr, "provider") {
			t.Errorf("stderr %q does not say the provider failed", stderr)
		}
	})

	t.Run("fails on bad flags", func(t *testing.T) {
		e, _, _, _, _ := newReconcileEnv(t)
		for _, tc := range []struct{ args, want string }{
			{"--since 0s", "--since"}, {"--since -1h", "--since"}, {"--since soon", "since"},
			{"--tenant ada", "--tenant"}, {"--tenant 999999", "tenant 999999 not found"},
		} {
			args := append([]string{"psp", "reconcile"}, strings.Fields(tc.args)...)
			if stderr := e.MustFail(t, args...); !strings.Contains(stderr, tc.want) {
				t.Errorf("%s: stderr %q does not mention %q", tc.args, stderr, tc.want)
			}
		}
	})
}

// absDiff is |s - want| for s a decimal Unix time; an unparsable s is far from anything.
func absDiff(s string, want int64) int64 {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 1 << 62
	}
	if n > want {
		return n - want
	}
	return want - n
}
