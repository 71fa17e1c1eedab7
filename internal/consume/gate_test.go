package consume

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/eventq/eventq/internal/clock"
	"github.com/eventq/eventq/internal/eventqueue"
	"github.com/eventq/eventq/internal/testenv"
)

// A tenant's reads are served TenantReads at a time: a read whose page is not released yet
// holds its turn (a client that does not read its answer), the tenant's next read waits for
// it, and another tenant's does not; nor do the tenant's lease calls, which take turns of their
// own.
func TestATenantsReadsTakeTurns(t *testing.T) {
	e := startConsume(t)
	e.Consume.TenantReads, e.Consume.TenantLeases = 1, 1
	a, b := testenv.MustTenant(t, e.DB, true), testenv.MustTenant(t, e.DB, true)
	e.mustIngest(t, a.ID, 3)
	e.mustIngest(t, b.ID, 3)
	ctx := context.Background()
	held, _, err := e.Consume.Read(ctx, a.ID, 10, 0)
	if err != nil || held.Count != 3 {
		t.Fatalf("read: %v, %+v", err, held)
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, _, err := e.Consume.Read(short, a.ID, 10, 0); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a second read of the tenant while the first page is held: %v, want it to wait", err)
	}
	if _, err := e.Consume.Lease(ctx, a.ID, LeaseRequest{Limit: 1, Visibility: time.Minute}); err != nil {
		t.Fatalf("a lease of the tenant while a page is held: %v", err)
	}
	other, _, err := e.Consume.Read(ctx, b.ID, 10, 0)
	if err != nil || other.Count != 3 {
		t.Fatalf("another tenant's read: %v, %+v", err, other)
	}
	other.Release()
	done := make(chan error, 1)
	go func() {
		page, _, err := e.Consume.Read(ctx, a.ID, 10, 0)
		if err == nil {
			page.Release()
		}
		done <- err
	}()
	held.Release()
	if err := <-done; err != nil {
		t.Fatalf("the read after the release: %v", err)
	}
	if _, err := e.Consume.Lease(ctx, a.ID, LeaseRequest{Limit: 1, Visibility: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if n := e.Consume.reads.Keys() + e.Consume.leases.Keys(); n != 0 {
		t.Fatalf("%d tenants' turns kept after their calls", n)
	}
}

// A read that waits for an event holds no turn while it waits: two long polls of a tenant on
// an empty queue leave a third read (of its one turn here) served at once.
func TestALongPollHoldsNoTurnWhileItWaits(t *testing.T) {
	e := startConsume(t)
	e.Consume.TenantReads = 1
	e.Consume.Waiter = eventqueue.NewWaiter(e.Redis.Client(), clock.Real{}, slog.New(slog.DiscardHandler))
	defer e.Consume.Waiter.Close()
	tn := testenv.MustTenant(t, e.DB, true)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	waiting := make(chan struct{}, 2)
	for range 2 {
		go func() {
			page, _, err := e.Consume.Read(ctx, tn.ID, 10, 20*time.Second)
			if err == nil {
				page.Release()
			}
			waiting <- struct{}{}
		}()
	}
	time.Sleep(200 * time.Millisecond) // the long polls are waiting; not a synchronisation
	short, stop := context.WithTimeout(ctx, 5*time.Second)
	defer stop()
	page, _, err := e.Consume.Read(short, tn.ID, 10, 0)
	if err != nil {
		t.Fatalf("a read beside two long polls: %v, want it served", err)
	}
	page.Release()
	cancel()
	<-waiting
	<-waiting
}
