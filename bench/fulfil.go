package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/eventq/eventq/internal/psp"
)

// Fulfilment is scenario 5 (Postgres): distinct paid sessions posted as webhooks at a fixed
// rate; the time from the first post until every purchase is committed, and each session's
// webhook-to-purchase latency (purchases.created_at minus the time its webhook was posted).
// The floor is Postgres committing the same writes (purchase, entitlement, event: one
// transaction per session) on 8 pgx connections.
type Fulfilment struct {
	Sessions        int     `json:"sessions"`
	RatePerSec      float64 `json:"post_rate_per_second"`
	PostFailures    int     `json:"post_failures"`
	Committed       int     `json:"committed"`
	ElapsedSeconds  float64 `json:"elapsed_seconds"` // first post to last purchase seen committed
	PurchasesPerSec float64 `json:"purchases_per_second"`
	Latency         Latency `json:"webhook_to_purchase"`
	FloorTxPerSec   float64 `json:"floor_transactions_per_second"`
	Ratio           float64 `json:"ratio"` // PurchasesPerSec ÷ FloorTxPerSec
	TargetPerSec    float64 `json:"target_purchases_per_second_min"`
	TargetP50       float64 `json:"target_p50_ms_max"`
	MetThroughput   bool    `json:"met_throughput"`
	MetP50          bool    `json:"met_p50"`
}

// benchFulfilment runs scenario 5 on shop (which must have no purchases yet); floorShop gets
// the floor's rows. It waits at most timeout for the purchases.
func benchFulfilment(ctx context.Context, s *stack, shop, floorShop *tenant, n int, rate float64, floorDur, timeout time.Duration) (*Fulfilment, error) {
	res := &Fulfilment{Sessions: n, RatePerSec: rate, TargetPerSec: 300, TargetP50: 50}
	pool, err := pgxpool.New(ctx, s.dbURL)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	if res.FloorTxPerSec, err = fulfilFloor(ctx, pool, floorShop, 8, floorDur); err != nil {
		return nil, err
	}

	deliveries := paidDeliveries(shop, n, "ful")
	posted := make([]time.Time, n)
	count := func() (int, error) {
		var c int
		err := pool.QueryRow(ctx, "SELECT count(*) FROM purchases WHERE tenant_id = $1", int64(shop.ID)).Scan(&c)
		return c, err
	}

	start := time.Now()
	var (
		wg       sync.WaitGroup
		finished time.Time
		pollErr  error
	)
	wg.Add(1)
	go func() { // every 10 ms, until every purchase is committed
		defer wg.Done()
		deadline := start.Add(timeout)
		for {
			c, err := count()
			if err != nil {
				pollErr = err
				return
			}
			res.Committed = c
			if c >= n {
				finished = time.Now()
				return
			}
			if time.Now().After(deadline) || sleepCtx(ctx, 10*time.Millisecond) != nil {
				return
			}
		}
	}()
	r := openLoop{Rate: rate, N: n, Do: func(ctx context.Context, i int) error {
		posted[i] = time.Now()
		return s.postDelivery(ctx, deliveries[i])
	}}.run(ctx)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if pollErr != nil {
		return nil, pollErr
	}
	res.PostFailures = r.Failed + r.Dropped
	if finished.IsZero() {
		s.logf("  fulfilment: only %d of %d purchases after %s", res.Committed, n, timeout)
		finished = time.Now()
	}
	res.ElapsedSeconds = finished.Sub(start).Seconds()
	res.PurchasesPerSec = float64(res.Committed) / res.ElapsedSeconds

	sent := make(map[string]time.Time, n)
	for i, d := range deliveries {
		sent[d.session] = posted[i]
	}
	rows, err := pool.Query(ctx, "SELECT psp_checkout_session_id, created_at FROM purchases WHERE tenant_id = $1", int64(shop.ID))
	if err != nil {
		return nil, err
	}
	var lat []time.Duration
	for rows.Next() {
		var (
			id string
			at time.Time
		)
		if err := rows.Scan(&id, &at); err != nil {
			return nil, err
		}
		if t, ok := sent[id]; ok {
			lat = append(lat, max(0, at.Sub(t)))
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	res.Latency = summarize(lat)
	if res.FloorTxPerSec > 0 {
		res.Ratio = res.PurchasesPerSec / res.FloorTxPerSec
	}
	res.MetThroughput = res.PurchasesPerSec >= res.TargetPerSec && res.Committed == n
	res.MetP50 = res.Latency.N > 0 && res.Latency.P50 <= res.TargetP50
	return res, nil
}

// fulfilFloor measures transactions/s of the writes a fulfilment commits (a purchase, its
// entitlement and its purchase_completed event) for shop, on conns connections, for d.
func fulfilFloor(ctx context.Context, pool *pgxpool.Pool, shop *tenant, conns int, d time.Duration) (float64, error) {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		total int
		first error
	)
	start := time.Now()
	deadline := start.Add(d)
	for range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := 0
			for time.Now().Before(deadline) && ctx.Err() == nil {
				if err := fulfilTx(ctx, pool, shop); err != nil {
					mu.Lock()
					first = err
					mu.Unlock()
					return
				}
				n++
			}
			mu.Lock()
			total += n
			mu.Unlock()
		}()
	}
	wg.Wait()
	if first != nil {
		return 0, fmt.Errorf("fulfilment floor: %w", first)
	}
	return float64(total) / time.Since(start).Seconds(), ctx.Err()
}

func fulfilTx(ctx context.Context, pool *pgxpool.Pool, shop *tenant) error {
	now := time.Now().UTC()
	session := psp.NewID("cs_test_floor")
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var id int64
		err := tx.QueryRow(ctx, `INSERT INTO purchases (tenant_id, audience_member_id, product_id,
			psp_checkout_session_id, psp_payment_intent_id, amount_total, currency, created_at, updated_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8) ON CONFLICT (psp_checkout_session_id) DO NOTHING RETURNING id`,
			int64(shop.ID), int64(shop.Member.ID), int64(shop.Product.ID), session, psp.NewID("pi"),
			shop.Product.Amount, shop.Product.Currency, now).Scan(&id)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO entitlements (tenant_id, audience_member_id, product_id, purchase_id,
			created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $5)`,
			int64(shop.ID), int64(shop.Member.ID), int64(shop.Product.ID), id, now); err != nil {
			return err
		}
		member := fmt.Sprint(shop.Member.ID)
		_, err = tx.Exec(ctx, "INSERT INTO tracked_events ("+trackedColumns+") VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13)",
			uuid.Must(uuid.NewV7()).String(), int64(shop.ID), "purchase_completed", session, &member,
			"http://127.0.0.1/checkout/return?tenant=1&session_id="+session, "127.0.0.1", "/checkout/return",
			"eventq", "", int64(0), false, now) // not pending: see rowValues
		return err
	})
}
