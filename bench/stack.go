package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"github.com/eventq/eventq/internal/auth"
	"github.com/eventq/eventq/internal/clock"
	"github.com/eventq/eventq/internal/database"
	"github.com/eventq/eventq/internal/features"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/models"
)

// webhookSecret signs every provider event the bench posts.
const webhookSecret = "whsec_bench_secret"

// stack is everything the bench runs against: its own redis-server (no persistence), a
// Postgres server, a temp dir for the SQLite file and the logs, the api and worker binaries
// built from this checkout, and, between startServices and stopServices, one api and one
// worker process on one database.
type stack struct {
	dir    string
	binDir string
	keep   bool
	logf   func(string, ...any)

	redisCmd *exec.Cmd
	redisURL string
	rdb      *redis.Client
	pg       *testenv.Postgres

	// extraEnv is added to the api's and worker's environment by startServices.
	extraEnv []string
	starts   int
	// profile makes startServices give the api and the worker each a PPROF_ADDR, whose
	// addresses pprofAPI and pprofWorker are then.
	profile               bool
	pprofAPI, pprofWorker string
	// peaks records the api's and worker's peak RSS per scenario (measure).
	peaks     peaks
	workerEnv []string // the worker's environment, for startWorker
	phase     string   // names the logs of this start

	// Set by startServices.
	dbURL  string
	db     *gorm.DB
	base   string
	api    *proc
	worker *proc
	http   *http.Client
}

// newStack builds the binaries and starts Redis and Postgres. On error, what was started is
// stopped again.
func newStack(ctx context.Context, logf func(string, ...any), keep bool) (_ *stack, err error) {
	s := &stack{logf: logf, keep: keep, http: newHTTPClient()}
	defer func() {
		if err != nil { // s, not the result, which a failed return has set to nil
			s.close()
		}
	}()
	if s.dir, err = os.MkdirTemp("", "eventq-bench-"); err != nil {
		return nil, err
	}
	s.binDir = filepath.Join(s.dir, "bin")
	root, err := moduleRoot()
	if err != nil {
		return nil, err
	}
	logf("building api and worker")
	build := exec.CommandContext(ctx, "go", "build", "-tags", "bench", "-o", s.binDir+"/", "./cmd/api", "./cmd/worker")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build: %v\n%s", err, out)
	}

	if _, err := exec.LookPath("redis-server"); err != nil {
		return nil, errors.New("redis-server not found: install the Debian package redis-server (make bench does this)")
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	redisDir := filepath.Join(s.dir, "redis")
	if err := os.MkdirAll(redisDir, 0o755); err != nil {
		return nil, err
	}
	logf("starting redis-server and postgres")
	if s.redisCmd, err = testenv.StartRedisServer(port, redisDir, "--appendonly", "no"); err != nil {
		return nil, err
	}
	s.redisURL = fmt.Sprintf("redis://127.0.0.1:%d/0", port)
	s.rdb = redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port), PoolSize: 64})
	// Durable, as in production: every commit waits for its WAL flush, which is what group
	// commit amortises, and the floor pays the same.
	if s.pg, err = testenv.StartPostgres("fsync=on", "synchronous_commit=on", "full_page_writes=on"); err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	return s, nil
}

// close stops everything and removes the temp dir. Safe to call more than once.
func (s *stack) close() {
	s.stopServices()
	if s.rdb != nil {
		s.rdb.Close()
		s.rdb = nil
	}
	if s.redisCmd != nil {
		s.redisCmd.Process.Signal(syscall.SIGTERM)
		s.redisCmd.Wait()
		s.redisCmd = nil
	}
	if s.pg != nil {
		s.pg.Stop()
		s.pg = nil
	}
	if s.dir != "" && s.keep {
		s.logf("kept %s (api-*.log, worker-*.log, the SQLite file)", s.dir)
	} else if s.dir != "" {
		os.RemoveAll(s.dir)
	}
	s.dir = ""
}

// postgresDatabase creates a database on the bench's Postgres and returns its URL.
func (s *stack) postgresDatabase(name string) (string, error) {
	return s.pg.CreateDatabase(name)
}

// sqliteDatabase returns the URL of a SQLite file in the temp dir.
func (s *stack) sqliteDatabase(name string) string {
	return "sqlite://" + filepath.Join(s.dir, name+".db")
}

// startServices empties Redis, migrates dbURL, and starts an api and a worker on it, as in
// production: only the environment variables of docs/configuration.md, nothing else of ours.
func (s *stack) startServices(ctx context.Context, dbURL string) error {
	if err := s.rdb.FlushAll(ctx).Err(); err != nil {
		return fmt.Errorf("flush redis: %w", err)
	}
	db, err := database.Open(dbURL)
	if err != nil {
		return err
	}
	if err := database.Migrate(db); err != nil {
		database.Close(db)
		return err
	}
	s.dbURL, s.db = dbURL, db
	phase := "sqlite"
	if strings.HasPrefix(dbURL, "postgres") {
		phase = "postgres"
	}
	s.starts++
	phase = fmt.Sprintf("%s-%d", phase, s.starts) // each start keeps its own logs
	port, err := freePort()
	if err != nil {
		return err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	s.base = "http://" + addr
	env := s.serviceEnv(s.extraEnv)
	apiEnv, workerEnv := append(env[:len(env):len(env)], "HTTP_ADDR="+addr, "BENCH_NOOP_ROUTE=on"), env[:len(env):len(env)] // the no-op route: the HTTP floor
	if s.profile {
		if s.pprofAPI, s.pprofWorker, err = twoFreeAddrs(); err != nil {
			return err
		}
		apiEnv, workerEnv = append(apiEnv, "PPROF_ADDR="+s.pprofAPI), append(workerEnv, "PPROF_ADDR="+s.pprofWorker)
	}
	s.api = &proc{name: "api", peaks: &s.peaks, path: filepath.Join(s.binDir, "api"), env: apiEnv,
		logPath: filepath.Join(s.dir, "api-"+phase+".log")}
	if err := s.startAPI(ctx, s.api, s.base); err != nil {
		return err
	}
	s.workerEnv, s.phase = workerEnv, phase
	return s.startWorker()
}

// serviceEnv is the environment of an api or worker on the current database, with extra last.
func (s *stack) serviceEnv(extra []string) []string {
	env := append(os.Environ(), "DATABASE_URL="+s.dbURL, "REDIS_URL="+s.redisURL,
		"PSP_WEBHOOK_SECRET="+webhookSecret, "APP_URL="+s.base)
	env = append(env, testenv.NoRateLimits...) // the load comes from one address, far above the defaults
	env = append(env, "METRICS_ADDR=off")      // several apis at once; the bench reads no metrics
	return append(env, extra...)
}

// startAPI starts p, an api listening at base, and waits until it answers /readyz.
func (s *stack) startAPI(ctx context.Context, p *proc, base string) error {
	if err := p.start(); err != nil {
		return err
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		res, err := s.http.Get(base + "/readyz")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == 200 {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the api did not become ready within 20s:\n%s", p.tail())
		}
		if err := sleepCtx(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
}

// startSideAPI starts a second api on the running services' database and Redis, with extra
// added to its environment, and returns it with its base URL: the same work through two
// configurations at once. The caller stops it.
func (s *stack) startSideAPI(ctx context.Context, name string, extra []string) (*proc, string, error) {
	port, err := freePort()
	if err != nil {
		return nil, "", err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	s.starts++
	p := &proc{name: "api " + name, peaks: &s.peaks, path: filepath.Join(s.binDir, "api"), env: append(s.serviceEnv(extra), "HTTP_ADDR="+addr),
		logPath: filepath.Join(s.dir, fmt.Sprintf("api-%s-%s-%d.log", name, s.phase, s.starts))}
	if err := s.startAPI(ctx, p, "http://"+addr); err != nil {
		return nil, "", err
	}
	return p, "http://" + addr, nil
}

// startWorker starts a worker with the environment of the last startServices, after a stopped
// one (each start writes its own log).
func (s *stack) startWorker() error {
	if s.worker != nil {
		s.worker.stop()
	}
	s.starts++
	s.worker = &proc{name: "worker", peaks: &s.peaks, path: filepath.Join(s.binDir, "worker"), env: s.workerEnv,
		logPath: filepath.Join(s.dir, fmt.Sprintf("worker-%s-%d.log", s.phase, s.starts))}
	return s.worker.start()
}

// twoFreeAddrs returns two loopback addresses that were free a moment ago.
func twoFreeAddrs() (string, string, error) {
	a, err := freePort()
	if err != nil {
		return "", "", err
	}
	b, err := freePort()
	for err == nil && b == a {
		b, err = freePort()
	}
	return fmt.Sprintf("127.0.0.1:%d", a), fmt.Sprintf("127.0.0.1:%d", b), err
}

// stopServices stops the api and worker (SIGTERM, clean shutdown) and closes the database.
func (s *stack) stopServices() {
	for _, p := range []*proc{s.api, s.worker} {
		if p != nil {
			p.stop()
		}
	}
	s.api, s.worker = nil, nil
	if s.db != nil {
		database.Close(s.db)
		s.db = nil
	}
}

// proc is a binary run as a child process that dies with the bench; its output goes to a log
// file in the temp dir.
type proc struct {
	name, path, logPath string
	env                 []string
	cmd                 *exec.Cmd
	log                 *os.File
	peaks               *peaks // notes the peak RSS as the process stops; may be nil
}

func (p *proc) start() error {
	f, err := os.Create(p.logPath)
	if err != nil {
		return err
	}
	p.log = f
	p.cmd = exec.Command(p.path)
	p.cmd.Env = p.env
	// Through a pipe, as under a container runtime, rather than straight into a file on the
	// disk that Postgres fsyncs.
	out := struct{ io.Writer }{f} // not an *os.File, so exec copies from a pipe
	p.cmd.Stdout, p.cmd.Stderr = out, out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	return nil
}

// stop sends SIGTERM and waits up to 15 s for a clean exit, then kills.
func (p *proc) stop() {
	if p.cmd == nil {
		return
	}
	p.peaks.note(p)
	p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		p.cmd.Process.Kill()
		<-done
	}
	p.cmd = nil
	p.log.Close()
}

// pid is the process id, 0 when stopped.
func (p *proc) pid() int {
	if p == nil || p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// tail is the last 4 KiB of the process's log.
func (p *proc) tail() string {
	b, _ := os.ReadFile(p.logPath)
	if len(b) > 4096 {
		b = b[len(b)-4096:]
	}
	return string(b)
}

// peakRSS is the process's peak resident set (VmHWM) in MiB, 0 if unknown.
func peakRSS(pid int) float64 { return statusMiB(pid, "VmHWM:") }

// rssMiB is the process's current resident set (VmRSS) in MiB, 0 if unknown.
func rssMiB(pid int) float64 { return statusMiB(pid, "VmRSS:") }

// statusMiB reads a kB field of /proc/PID/status in MiB, 0 if unknown.
func statusMiB(pid int, field string) float64 {
	return kBFieldMiB(fmt.Sprintf("/proc/%d/status", pid), field)
}

// kBFieldMiB reads the field ("Name:") of a /proc file of "Name: N kB" lines in MiB, 0 if
// unknown.
func kBFieldMiB(path, field string) float64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}

// tenant is a seeded tenant: its public site key, an API token with every ability, and,
// for shops, a member and a product.
type tenant struct {
	models.Tenant
	Token   string
	Member  models.AudienceMember
	Product models.Product
}

var tenantSerial atomic.Int64

// seedTenant creates a tenant with a token; account, when set, is its connected account (and
// it gets a member and a product); queued activates UseQueueEvents.
func (s *stack) seedTenant(ctx context.Context, account string, queued bool) (*tenant, error) {
	n := tenantSerial.Add(1)
	t := &tenant{Tenant: models.Tenant{Name: fmt.Sprintf("Bench %d", n), SiteKey: fmt.Sprintf("site_bench_%d", n)}}
	if account != "" {
		t.PSPAccountID = &account
	}
	db := s.db.WithContext(ctx)
	if err := db.Create(&t.Tenant).Error; err != nil {
		return nil, fmt.Errorf("seed tenant: %w", err)
	}
	_, token, err := auth.CreateToken(ctx, s.db, t.ID, "bench", nil, nil)
	if err != nil {
		return nil, err
	}
	t.Token = token
	if queued {
		if err := features.New(s.db, clock.Real{}).Set(ctx, features.UseQueueEvents, t.ID, true); err != nil {
			return nil, err
		}
	}
	if account != "" {
		t.Member = models.AudienceMember{TenantID: t.ID, Email: fmt.Sprintf("buyer%d@example.com", n), Name: "Buyer"}
		if err := db.Create(&t.Member).Error; err != nil {
			return nil, fmt.Errorf("seed member: %w", err)
		}
		t.Product = models.Product{TenantID: t.ID, Name: "Course", Amount: 4900, Currency: "usd"}
		if err := db.Create(&t.Product).Error; err != nil {
			return nil, fmt.Errorf("seed product: %w", err)
		}
	}
	return t, nil
}

// request builds a request to the api with the token's Authorization, if any.
func (s *stack) request(ctx context.Context, method, path, token string, body []byte) *http.Request {
	return s.requestTo(ctx, s.base, method, path, token, body)
}

// requestTo is request to the api at base.
func (s *stack) requestTo(ctx context.Context, base, method, path, token string, body []byte) *http.Request {
	req, _ := http.NewRequestWithContext(ctx, method, base+path, bytes.NewReader(body))
	if body == nil {
		req.Body, req.ContentLength = http.NoBody, 0
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return req
}

func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("run the bench inside the eventq module")
	}
	return filepath.Dir(mod), nil
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
