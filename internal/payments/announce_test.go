package payments_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/eventq/eventq/internal/changes"
	"github.com/eventq/eventq/internal/payments"
)

// announcer records announcements, and fails them while fail is set.
type announcer struct {
	mu   sync.Mutex
	got  []changes.Change
	fail bool
}

func (a *announcer) Announce(_ context.Context, c changes.Change) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.fail {
		return errors.New("redis is down")
	}
	a.got = append(a.got, c)
	return nil
}

func (a *announcer) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.got)
}

// A fulfilment announces the member's entitlements once it committed; a failed announcement
// fails the fulfilment (its job retries), and the retry, already fulfilled, announces again.
func TestFulfilAnnouncesTheMembersEntitlements(t *testing.T) {
	e := newEnv(t, true)
	a := &announcer{fail: true}
	e.Svc.Changes = a
	sh := e.MustShop(t, "acct_announce")
	s := e.Session(sh)
	if _, err := e.Svc.Fulfil(context.Background(), s); err == nil {
		t.Fatal("a fulfilment whose announcement failed succeeded")
	}
	a.mu.Lock()
	a.fail = false
	a.mu.Unlock()
	res, err := e.Svc.Fulfil(context.Background(), s)
	if err != nil || res.Status != payments.StatusAlreadyFulfilled {
		t.Fatalf("the retry: %+v, %v", res, err)
	}
	if a.count() != 1 {
		t.Fatalf("%d announcements, want 1", a.count())
	}
	want := changes.Change{Kind: changes.Entitlements, Tenant: sh.Tenant.ID, ID: sh.Member.ID}
	if got := a.got[0]; got.Kind != want.Kind || got.Tenant != want.Tenant || got.ID != want.ID {
		t.Fatalf("announced %+v, want %+v", got, want)
	}
}
