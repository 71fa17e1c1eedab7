package consume

import (
	"context"
	"testing"
	"time"

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
