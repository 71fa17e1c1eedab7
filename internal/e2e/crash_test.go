//go:build chaos

package e2e

import (
	"testing"
	"time"

	"github.com/stripe/stripe-go/v76"

	"github.com/eventq/eventq/internal/database"
	"github.com/eventq/eventq/internal/psp"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/models"
)

// The worker is killed (SIGKILL) while its fulfilment transaction is open: after a restart the
// task is recovered and the outcome is exactly one purchase, entitlement and event.
func TestChaosWorkerKilledMidFulfilmentRecovers(t *testing.T) {
	// Takes about a minute: asynq recovers a task only after its lease has expired.
	s := startStack(t)
	sh := s.MustShop(t, "acct_shop1", true)
	cs := s.PaidSession(sh, "acct_shop1")
	id, payload := psp.NewEvent(stripe.EventTypeCheckoutSessionCompleted, "acct_shop1", cs, time.Now())

	// Hold a lock that fulfilment needs half-way: on Postgres the entitlements table (the
	// purchase row is written, the entitlement waits); on SQLite the write lock.
	release := s.blockFulfilment(t)
	s.MustDeliver(t, payload)
	s.waitUntilFulfilmentBlocked(t, id)
	s.Worker.Kill()
	release()

	if c := s.Count(t, &models.Purchase{}, "1 = 1"); c != 0 {
		t.Fatalf("%d purchases committed by a killed worker", c)
	}
	s.Worker.Start()
	testenv.Eventually(t, 150*time.Second, "the recovered task fulfils the checkout", func() bool {
		return s.TaskState(id) == "completed"
	})
	for what, c := range map[string]int64{
		"purchases":    s.Count(t, &models.Purchase{}, "1 = 1"),
		"entitlements": s.Count(t, &models.Entitlement{}, "1 = 1"),
		"events":       s.Count(t, &models.TrackedEvent{}, "type = ?", "purchase_completed"),
	} {
		if c != 1 {
			t.Fatalf("%d %s, want 1", c, what)
		}
	}
	if n, _ := s.Queue.Len(t.Context(), sh.Tenant.ID); n != 1 {
		t.Fatalf("%d queued events, want 1", n)
	}
}

// blockFulfilment takes a lock that the worker's fulfilment transaction waits for and returns
// the function that releases it.
func (s *stack) blockFulfilment(t *testing.T) (release func()) {
	t.Helper()
	sqlDB, err := s.DB.DB()
	testenv.Must(t, err)
	tx, err := sqlDB.Begin()
	testenv.Must(t, err)
	if database.IsPostgres(s.DB) {
		_, err = tx.Exec("LOCK TABLE entitlements IN ACCESS EXCLUSIVE MODE")
	} else {
		_, err = tx.Exec("INSERT INTO webhook_inbox (event_id, type, payload, created_at) VALUES ('lock', 'lock', x'00', CURRENT_TIMESTAMP)")
	}
	testenv.Must(t, err)
	return func() { testenv.Must(t, tx.Rollback()) }
}

// waitUntilFulfilmentBlocked waits until the task is running and, on Postgres, its
// transaction is waiting for the entitlements lock after inserting the purchase.
func (s *stack) waitUntilFulfilmentBlocked(t *testing.T, taskID string) {
	t.Helper()
	testenv.Eventually(t, 20*time.Second, "the task is active", func() bool { return s.TaskState(taskID) == "active" })
	if !database.IsPostgres(s.DB) {
		time.Sleep(500 * time.Millisecond) // no lock-wait view in SQLite; give the worker time to block
		return
	}
	sqlDB, _ := s.DB.DB()
	testenv.Eventually(t, 20*time.Second, "the worker waits on the entitlements lock", func() bool {
		var n int
		err := sqlDB.QueryRow(`SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query ILIKE '%entitlements%'`).Scan(&n)
		return err == nil && n == 1
	})
}
