package features_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/eventq/eventq/internal/features"

	"github.com/eventq/eventq/internal/clock"
	"github.com/eventq/eventq/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestFlags(t *testing.T) {
	db, _ := testenv.DB(t)
	ctx := context.Background()
	clk := clock.NewFake(time.Now())
	api, cli := features.New(db, clk), features.New(db, clk) // two processes: one reads, the other switches

	queues := func(tenant uint64) bool {
		t.Helper()
		on, err := api.Queues(ctx, tenant)
		if err != nil {
			t.Fatal(err)
		}
		return on
	}
	if queues(1) {
		t.Fatal("flags are opt-in: no row must mean off")
	}
	if err := cli.Set(ctx, features.UseQueueEvents, 1, true); err != nil {
		t.Fatal(err)
	}
	if queues(1) {
		t.Fatal("the other process's cached value must hold until features.CacheTTL")
	}
	clk.Advance(features.CacheTTL)
	if !queues(1) {
		t.Fatal("activation not seen features.CacheTTL after it")
	}
	if err := cli.Set(ctx, features.UseQueueEvents, 1, false); err != nil {
		t.Fatal(err)
	}
	clk.Advance(features.CacheTTL)
	if queues(1) {
		t.Fatal("deactivation not seen features.CacheTTL after it")
	}
	if queues(2) {
		t.Fatal("tenant 2 was never switched on")
	}

	// The switching process sees its own change at once.
	if err := cli.Set(ctx, features.UseQueueEvents, 3, true); err != nil {
		t.Fatal(err)
	}
	if on, _ := cli.Queues(ctx, 3); !on {
		t.Fatal("own change not seen at once")
	}
	ids, err := cli.ActiveTenants(ctx, features.UseQueueEvents)
	if err != nil || len(ids) != 1 || ids[0] != 3 {
		t.Fatalf("ActiveTenants: %v, %v", ids, err)
	}
	if err := cli.Set(ctx, "NoSuchFeature", 1, true); !errors.Is(err, features.ErrUnknownFeature) {
		t.Fatalf("unknown feature: %v", err)
	}
	if features.CacheTTL > 5*time.Second {
		t.Fatalf("features.CacheTTL %s exceeds the promised 5 s", features.CacheTTL)
	}
}
