package consume

import (
	"context"
	"testing"
	"time"

	"github.com/eventq/eventq/internal/eventqueue"
	"github.com/eventq/eventq/internal/testenv"
)

// A lease call for a tenant whose events are not queued leases nothing and reports an expiry
// visibility after now on the Service's clock.
func TestLeaseWithTheFlagOffExpiresOnTheServiceClock(t *testing.T) {
	e := startConsume(t)
	e.Clock.Advance(-72 * time.Hour) // far from the system clock
	tenant := testenv.MustTenant(t, e.DB, false).ID
	got, err := e.Consume.Lease(context.Background(), tenant, LeaseRequest{Limit: 10, Visibility: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Events) != 0 {
		t.Fatalf("leased %d events of a tenant whose events are not queued", len(got.Events))
	}
	if want := e.Clock.Now().Add(30 * time.Second).UTC(); !got.ExpiresAt.Equal(want) {
		t.Fatalf("expires at %v, want %v (the Service's clock plus the visibility)", got.ExpiresAt, want)
	}
}

// The maintenance sweep bounds the dead letters of every tenant, including those no one reads.
func TestPruneDeadLettersReachesEveryTenant(t *testing.T) {
	e := startConsume(t)
	ctx := context.Background()
	e.Consume.Dead = eventqueue.DeadPolicy{Max: 2}
	var tenants []uint64
	for i := 0; i < 3; i++ {
		tn := testenv.MustTenant(t, e.DB, true).ID
		tenants = append(tenants, tn)
		for j := 0; j < 3+i; j++ { // written as an older version would, without times
			e.Redis.Client().RPush(ctx, eventqueue.DeadKey(tn), `{"offset":0,"deliveries":10,"event":{}}`)
		}
	}
	dropped, err := e.Consume.PruneDeadLetters(ctx)
	if err != nil || dropped != 1+2+3 {
		t.Fatalf("dropped %d, %v; want 6", dropped, err)
	}
	for _, tn := range tenants {
		if n, _ := e.Redis.Client().LLen(ctx, eventqueue.DeadKey(tn)).Result(); n != 2 {
			t.Fatalf("tenant %d keeps %d dead letters, want 2", tn, n)
		}
	}
}
