package payments_test

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/eventq/eventq/internal/clock"
	"github.com/eventq/eventq/internal/database"
	"github.com/eventq/eventq/internal/payments"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/models"
)

// statements records the SQL statements a gorm.DB runs (not BEGIN and COMMIT, which gorm does
// not log).
type statements struct {
	logger.Interface
	mu  sync.Mutex
	sql []string
}

func (s *statements) Trace(_ context.Context, _ time.Time, fc func() (string, int64), _ error) {
	sql, _ := fc()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sql = append(s.sql, sql)
}

func (s *statements) take() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.sql
	s.sql = nil
	return out
}

// TestFulfilStatements checks how many statements a fulfilment runs: on Postgres one to check
// tenant, member and product and store the purchase with its entitlement and event, and one to
// look for a reversal recorded meanwhile; in a transaction (SQLite, or a reversal waiting) four
// more: the check on its own, then one a row. Both ways store the same rows.
func TestFulfilStatements(t *testing.T) {
	e := newEnv(t, true)
	rec := &statements{Interface: logger.Discard}
	e.Svc.DB = e.DB.Session(&gorm.Session{Logger: rec})
	now := time.Now().UTC().Truncate(time.Millisecond).Add(-time.Hour) // stored exactly
	e.Svc.Clock = clock.NewFake(now)

	postgres := database.IsPostgres(e.DB)
	want := 6
	if postgres {
		want = 2
	}
	sh := e.MustShop(t, "acct_statements")
	s := e.Session(sh)
	res, err := e.Svc.Fulfil(context.Background(), s)
	if err != nil || res.Status != payments.StatusFulfilled {
		t.Fatalf("Fulfil = %+v, %v", res, err)
	}
	if got := rec.take(); len(got) != want {
		t.Errorf("%d statements, want %d:\n%s", len(got), want, strings.Join(got, "\n"))
	}
	assertFulfilled(t, e, sh, s, res.PurchaseID)

	other := e.MustShop(t, "acct_statements_tx")
	s2 := e.Session(other)
	res2, err := e.Svc.FulfilInTransaction(context.Background(), s2)
	if err != nil || res2.Status != payments.StatusFulfilled {
		t.Fatalf("Fulfil in a transaction = %+v, %v", res2, err)
	}
	if got := rec.take(); len(got) != 6 {
		t.Errorf("in a transaction: %d statements, want 6:\n%s", len(got), strings.Join(got, "\n"))
	}
	assertFulfilled(t, e, other, s2, res2.PurchaseID)

	// Both ways stamp purchase, entitlement and event with the service's clock, and derive the
	// event's id from that time and the session.
	for _, sess := range []payments.Session{s, s2} {
		var p models.Purchase
		var ent models.Entitlement
		var ev models.TrackedEvent
		testenv.Must(t, e.DB.Take(&p, "psp_checkout_session_id = ?", sess.ID).Error)
		testenv.Must(t, e.DB.Take(&ent, "purchase_id = ?", p.ID).Error)
		testenv.Must(t, e.DB.Take(&ev, "session_id = ?", sess.ID).Error)
		if !p.CreatedAt.Equal(now) || !p.UpdatedAt.Equal(now) || !ent.CreatedAt.Equal(p.CreatedAt) || !ent.UpdatedAt.Equal(p.CreatedAt) || !ev.CreatedAt.Equal(p.CreatedAt) {
			t.Errorf("session %s: purchase %v/%v, entitlement %v/%v, event %v; want all %v", sess.ID,
				p.CreatedAt, p.UpdatedAt, ent.CreatedAt, ent.UpdatedAt, ev.CreatedAt, now)
		}
		if ev.ID != payments.EventID(payments.EventPurchaseCompleted, ev.CreatedAt, sess.ID) {
			t.Errorf("session %s: event id %s, want %s", sess.ID, ev.ID, payments.EventID(payments.EventPurchaseCompleted, ev.CreatedAt, sess.ID))
		}
	}
}

// TestFulfilAppliesAReversalRecordedWhileItRan makes a refund arrive while a fulfilment
// stores its purchase on Postgres: the purchase's insert waits on another transaction's
// uncommitted purchase of the same session, and the refund, which cannot see either, is
// parked meanwhile. When that transaction rolls back, the fulfilment must end the purchase it
// stores. The one statement took its snapshot before the refund and cannot see it: the query
// after its commit finds it (without that query the purchase stays paid, checked). The
// transaction's later statements see it and apply it before the commit. SQLite has one
// writer: such a race cannot happen there.
func TestFulfilAppliesAReversalRecordedWhileItRan(t *testing.T) {
	for _, inTx := range []bool{false, true} {
		t.Run(fmt.Sprintf("in a transaction %v", inTx), func(t *testing.T) { testReversalDuringFulfil(t, inTx) })
	}
}

func testReversalDuringFulfil(t *testing.T, inTx bool) {
	e := newEnv(t, true)
	if !database.IsPostgres(e.DB) {
		t.Skip("a race of two writers: Postgres only (SQLite has one writer)")
	}
	ctx := context.Background()
	sh := e.MustShop(t, "acct_race_refund")
	s := e.Session(sh)

	blocker := e.DB.Begin()
	testenv.Must(t, blocker.Error)
	defer blocker.Rollback()
	testenv.Must(t, blocker.Create(&models.Purchase{
		TenantID: sh.Tenant.ID, AudienceMemberID: sh.Member.ID, ProductID: sh.Product.ID,
		PSPCheckoutSessionID: s.ID, AmountTotal: 1, Currency: "usd",
	}).Error)

	type outcome struct {
		res payments.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		fulfil := e.Svc.Fulfil
		if inTx {
			fulfil = e.Svc.FulfilInTransaction
		}
		res, err := fulfil(ctx, s)
		done <- outcome{res, err}
	}()
	activity := testenv.StatActivity(t, e.DB)
	testenv.Eventually(t, 10*time.Second, "the fulfilment waits for the uncommitted purchase", func() bool {
		var n int64
		testenv.Must(t, e.DB.Raw(`SELECT count(*) FROM `+activity+`
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query ILIKE '%INSERT INTO%purchases%'`).Scan(&n).Error)
		return n == 1
	})

	r := payments.Reversal{Kind: models.PurchaseRefunded, PaymentIntent: s.PaymentIntent, Account: s.Account, EventID: "evt_race"}
	if out, err := e.Svc.Revoke(ctx, r); err != nil || out != payments.RevokeParked {
		t.Fatalf("Revoke = %q, %v; want %s (the purchase is not committed)", out, err, payments.RevokeParked)
	}
	testenv.Must(t, blocker.Rollback().Error)

	got := <-done
	if got.err != nil || got.res.Status != payments.StatusFulfilled {
		t.Fatalf("Fulfil = %+v, %v; want fulfilled", got.res, got.err)
	}
	var p models.Purchase
	testenv.Must(t, e.DB.Take(&p, got.res.PurchaseID).Error)
	inForce := e.Count(t, &models.Entitlement{}, "purchase_id = ? AND revoked_at IS NULL", p.ID)
	if p.Status != models.PurchaseRefunded || inForce != 0 {
		t.Errorf("purchase %s with %d entitlements in force, want refunded and none", p.Status, inForce)
	}
	want := []string{payments.EventPurchaseCompleted, payments.EventPurchaseRefunded}
	if got := e.Pusher.types(); !reflect.DeepEqual(got, want) {
		t.Errorf("pushed %v, want %v", got, want)
	}
}
