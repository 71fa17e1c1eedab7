package app

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/eventq/eventq/internal/clock"
	"github.com/eventq/eventq/internal/config"
	"github.com/eventq/eventq/internal/eventqueue"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/jobs"
	"github.com/eventq/eventq/models"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// mustConfig loads the configuration of a process on dbURL and r.
func mustConfig(t *testing.T, dbURL string, r *testenv.Redis, env ...string) config.Config {
	t.Helper()
	cfg, err := config.Load(append([]string{"DATABASE_URL=" + dbURL, "REDIS_URL=" + r.URL()}, env...))
	testenv.Must(t, err)
	return cfg
}

// openFiles counts this process's open file descriptors: a database connection holds one (the
// SQLite file, or the socket to Postgres).
func openFiles(t *testing.T) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	testenv.Must(t, err)
	return len(fds)
}

func TestOpen(t *testing.T) {
	r := testenv.StartRedis(t)
	_, dbURL := testenv.DB(t)
	cfg := mustConfig(t, dbURL, r)

	t.Run("a failed Open closes the database it had opened", func(t *testing.T) {
		// An Open and Close first, so that what the runtime opens once (the network poller)
		// is open before the count.
		a, err := Open(cfg, discard, clock.Real{})
		testenv.Must(t, err)
		testenv.Must(t, a.PingDB(context.Background()))
		testenv.Must(t, a.Close())
		before := openFiles(t)

		bad := cfg
		bad.QueueConnection = "events" // no REDIS_EVENTS_URL: config.Load would refuse it
		a, err = Open(bad, discard, clock.Real{})
		if err == nil || !strings.Contains(err.Error(), `no redis connection "events"`) || a != nil {
			t.Fatalf("Open = %v, %v; want nil and the missing connection named", a, err)
		}
		if after := openFiles(t); after != before {
			t.Fatalf("%d files open after a failed Open, %d before: it left the database open", after, before)
		}
	})

	t.Run("Close releases the services before the connections they write through", func(t *testing.T) {
		a, err := Open(cfg, discard, clock.Real{})
		testenv.Must(t, err)
		tn := testenv.MustTenant(t, a.DB, true)
		// The trim log writes what it recorded when it closes, which needs the database.
		a.Trims.Record(tn.ID, eventqueue.Trimmed{Count: 3, Front: 3, LastID: "e3"})
		rdb := a.Redis[config.DefaultConnection]
		testenv.Must(t, a.Close())

		check, err := Open(cfg, discard, clock.Real{})
		testenv.Must(t, err)
		defer check.Close()
		var front models.QueueFront
		if err := check.DB.Where("tenant_id = ?", tn.ID).Take(&front).Error; err != nil || front.Front != 3 {
			t.Fatalf("queue front after Close: %+v, %v; want front 3 written before the database closed", front, err)
		}
		if err := a.PingDB(context.Background()); err == nil {
			t.Error("the database answers after Close")
		}
		if err := rdb.Ping(context.Background()).Err(); !errors.Is(err, redis.ErrClosed) {
			t.Errorf("Redis Ping after Close = %v, want %v", err, redis.ErrClosed)
		}
		if err := a.Close(); err != nil {
			t.Errorf("second Close = %v, want nil", err)
		}
	})

	t.Run("provider events are queued in the queue the worker serves", func(t *testing.T) {
		a, err := Open(cfg, discard, clock.Real{})
		testenv.Must(t, err)
		defer a.Close()
		testenv.Must(t, a.Payments.Queue.Enqueue(context.Background(), "evt_app_1", "checkout.session.completed", []byte(`{}`)))
		info, err := a.TaskInspector().GetTaskInfo(jobs.TaskQueue, "evt_app_1")
		if err != nil || info.Queue != jobs.TaskQueue {
			t.Fatalf("task evt_app_1 in queue %q: %+v, %v", jobs.TaskQueue, info, err)
		}
	})

	t.Run("the reconciler exists only with a provider key", func(t *testing.T) {
		a, err := Open(cfg, discard, clock.Real{})
		testenv.Must(t, err)
		defer a.Close()
		if a.Reconciler != nil {
			t.Error("a Reconciler without PSP_SECRET_KEY")
		}
		b, err := Open(mustConfig(t, dbURL, r, "PSP_SECRET_KEY=sk_test_app"), discard, clock.Real{})
		testenv.Must(t, err)
		defer b.Close()
		if b.Reconciler == nil || b.Reconciler.Queue != b.Payments.Queue {
			t.Errorf("Reconciler = %+v; want one queuing events as the payment flow does", b.Reconciler)
		}
	})
}

// TestOpenMakesNoRedisConnection checks that Open and Close connect to no Redis: a CLI command
// that needs only the database must not wait for one (or, without one, for the client's
// dial retries).
func TestOpenMakesNoRedisConnection(t *testing.T) {
	_, dbURL := testenv.DB(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	testenv.Must(t, err)
	defer ln.Close()
	var dials atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			dials.Add(1)
			c.Close()
		}
	}()
	cfg, err := config.Load([]string{"DATABASE_URL=" + dbURL, "REDIS_URL=redis://" + ln.Addr().String() + "/0"})
	testenv.Must(t, err)
	a, err := Open(cfg, discard, clock.Real{})
	testenv.Must(t, err)
	testenv.Must(t, a.PingDB(context.Background()))
	testenv.Must(t, a.Close())
	// A sentinel connection of the test's own: the listener accepts in arrival order, so once
	// it is counted, every connection Open or Close made before it is counted too.
	c, err := net.Dial("tcp", ln.Addr().String())
	testenv.Must(t, err)
	defer c.Close()
	for deadline := time.Now().Add(10 * time.Second); dials.Load() == 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if n := dials.Load() - 1; n != 0 {
		t.Fatalf("Open and Close made %d connections to Redis, want 0", n)
	}
}
