package e2e

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"gorm.io/gorm"

	"github.com/eventq/eventq/app"
	"github.com/eventq/eventq/internal/clock"
	"github.com/eventq/eventq/internal/config"
	"github.com/eventq/eventq/internal/eventqueue"
	"github.com/eventq/eventq/internal/openapicheck"
	"github.com/eventq/eventq/internal/psp"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/jobs"
	"github.com/eventq/eventq/models"
)

const webhookSecret = "whsec_e2e_secret"

var binDir string

func TestMain(m *testing.M) {
	dir, cleanup, err := testenv.BuildBinaries("github.com/eventq/eventq/cmd/api", "github.com/eventq/eventq/cmd/worker",
		"github.com/eventq/eventq/cmd/eventq")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	binDir = dir
	testenv.Main(openapicheck.Watching(m), cleanup)
}

// stack is api and worker processes sharing a Redis (or Redis Cluster), a database and a
// fake provider. API, Worker and Base are the first of each.
type stack struct {
	Redis   *testenv.Redis // nil on a cluster
	DB      *gorm.DB
	PSP     *testenv.FakePSP
	API     *testenv.Process
	Worker  *testenv.Process
	Base    string
	APIs    []*testenv.Process
	Workers []*testenv.Process
	Bases   []string
	// Metrics is the URL of the first api's /metrics (its METRICS_ADDR).
	Metrics string
	Queue   *eventqueue.Store
	Tasks   *asynq.Inspector
	// Env is the environment every api and worker got (without HTTP_ADDR and APP_URL).
	Env []string
}

type stackOptions struct {
	cluster       bool
	apis, workers int
	env           []string
	db            *gorm.DB // with dbURL: the database to run on instead of a fresh one of the suite's
	dbURL         string
}

type option func(*stackOptions)

// onCluster runs the stack on a three-master Redis Cluster.
func onCluster() option { return func(o *stackOptions) { o.cluster = true } }

// withEnv adds environment variables to every api and worker.
func withEnv(vars ...string) option { return func(o *stackOptions) { o.env = append(o.env, vars...) } }

// onDatabase runs the stack on db (at url) instead of a fresh database of the suite's.
func onDatabase(db *gorm.DB, url string) option {
	return func(o *stackOptions) { o.db, o.dbURL = db, url }
}

// processes runs apis api and workers worker processes.
func processes(apis, workers int) option {
	return func(o *stackOptions) { o.apis, o.workers = apis, workers }
}

func startStack(t *testing.T, opts ...option) *stack {
	t.Helper()
	o := stackOptions{apis: 1, workers: 1}
	for _, opt := range opts {
		opt(&o)
	}
	db, dbURL := o.db, o.dbURL
	if db == nil {
		db, dbURL = testenv.DB(t)
	}
	fake := testenv.StartFakePSP(t)
	s := &stack{DB: db, PSP: fake}
	env := append(os.Environ(), "DATABASE_URL="+dbURL, "PSP_WEBHOOK_SECRET=whsec_old_rotated,"+webhookSecret,
		"PSP_SECRET_KEY=sk_test_e2e", "PSP_API_BASE="+fake.URL)
	env = append(env, testenv.NoRateLimits...)
	env = append(env, o.env...)
	if o.cluster {
		c := testenv.StartRedisCluster(t)
		env = append(env, "REDIS_URL=redis://"+c.Addrs[0], "REDIS_CLUSTER_ADDRS="+strings.Join(c.Addrs, ","))
	} else {
		s.Redis = testenv.StartRedis(t)
		env = append(env, "REDIS_URL="+s.Redis.URL())
	}
	// The test looks at Redis through the same application the binaries build from env.
	cfg, err := config.Load(env)
	testenv.Must(t, err)
	a, err := app.Open(cfg, slog.New(slog.DiscardHandler), clock.Real{})
	testenv.Must(t, err)
	t.Cleanup(func() { a.Close() })
	s.Queue, s.Tasks, s.Env = a.Queue, a.TaskInspector(), env
	for i := 0; i < o.apis; i++ {
		addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
		base := "http://" + addr
		openapicheck.API(base)
		metrics := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
		p := testenv.NewProcess(t, filepath.Join(binDir, "api"), append(env[:len(env):len(env)], "HTTP_ADDR="+addr, "APP_URL="+base, "METRICS_ADDR="+metrics))
		p.Start()
		if i == 0 {
			s.Metrics = "http://" + metrics + "/metrics"
		}
		testenv.WaitHTTP(t, base+"/healthz", 20*time.Second)
		s.APIs, s.Bases = append(s.APIs, p), append(s.Bases, base)
	}
	for i := 0; i < o.workers; i++ {
		p := testenv.NewProcess(t, filepath.Join(binDir, "worker"), append(env[:len(env):len(env)], "APP_URL="+s.Bases[0]))
		p.Start()
		s.Workers = append(s.Workers, p)
	}
	s.API, s.Worker, s.Base = s.APIs[0], s.Workers[0], s.Bases[0]
	return s
}

// shop is a tenant with a connected account, a member and a product.
type shop = testenv.Shop

// MustShop creates a shop on account with UseQueueEvents set to flag.
func (s *stack) MustShop(t *testing.T, account string, flag bool) shop {
	t.Helper()
	return testenv.MustShop(t, s.DB, account, flag)
}

// PaidSession returns a paid session of sh, stored at the fake provider on account.
func (s *stack) PaidSession(sh shop, account string) psp.SessionObject {
	cs := s.PSP.AddSession(account, psp.SessionObject{
		AmountTotal: sh.Product.Amount, Currency: sh.Product.Currency, Mode: "payment",
		PaymentStatus: "unpaid", Status: "open",
		Metadata: map[string]string{
			"tenant_id": models.FormatID(sh.Tenant.ID), "audience_member_id": models.FormatID(sh.Member.ID),
			"product_id": models.FormatID(sh.Product.ID),
		},
	})
	return s.PSP.Pay(cs.ID)
}

// Post sends payload to the webhook with header, returning status and how long it took.
func (s *stack) Post(t *testing.T, payload []byte, header string) (int, time.Duration) {
	t.Helper()
	req, _ := http.NewRequest("POST", s.Base+"/api/webhooks/psp", bytes.NewReader(payload))
	req.Header.Set("Content-Type", "application/json")
	if header != "" {
		req.Header.Set("PSP-Signature", header)
	}
	start := time.Now()
	res, err := http.DefaultClient.Do(req)
	took := time.Since(start)
	if err != nil {
		t.Fatalf("POST webhook: %v", err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode, took
}

// MustDeliver signs and posts an event and requires 200.
func (s *stack) MustDeliver(t *testing.T, payload []byte) time.Duration {
	t.Helper()
	status, took := s.Post(t, payload, psp.Sign(payload, webhookSecret, time.Now()))
	if status != 200 {
		t.Fatalf("webhook answered %d", status)
	}
	return took
}

// Count counts rows of model matching the query.
func (s *stack) Count(t *testing.T, model any, query string, args ...any) int64 {
	t.Helper()
	var n int64
	testenv.Must(t, s.DB.Model(model).Where(query, args...).Count(&n).Error)
	return n
}

// TaskState returns the asynq state of the task with id, or "none".
func (s *stack) TaskState(id string) string {
	info, err := s.Tasks.GetTaskInfo(jobs.TaskQueue, id)
	if err != nil {
		return "none"
	}
	return info.State.String()
}
