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
	// BelowCapacity and Capacity are the path's latency below the worker's capacity and
	// that capacity.
	BelowCapacity *FulfilRun      `json:"below_capacity"`
	Capacity      *FulfilCapacity `json:"capacity"`
}

// FulfilRun is a batch of paid sessions posted as webhooks at a rate below the worker's
// capacity, so that it measures the path and not a backlog: each session's
// webhook-to-purchase latency.
type FulfilRun struct {
	Sessions     int     `json:"sessions"`
	RatePerSec   float64 `json:"post_rate_per_second"`
	PostFailures int     `json:"post_failures"`
	Committed    int     `json:"committed"`
	Latency      Latency `json:"webhook_to_purchase"`
	TargetP50    float64 `json:"target_p50_ms_max"`
	TargetP99    float64 `json:"target_p99_ms_max"`
	Met          bool    `json:"met"` // both targets, and every session committed once
}

// FulfilCapacity is the most purchases a second the worker commits: a backlog of paid sessions
// acknowledged while the worker was stopped, drained once it starts, counted from its first
// purchase to its last (so the worker's start-up is not in it).
type FulfilCapacity struct {
	Sessions        int     `json:"sessions"`
	Committed       int     `json:"committed"`
	DrainSeconds    float64 `json:"drain_seconds"`
	PurchasesPerSec float64 `json:"purchases_per_second"`
	TargetPerSec    float64 `json:"target_purchases_per_second_min"`
	Met             bool    `json:"met"`
	// CPU time per session, less sensitive than the rates to other work on the machine: the
	// api's to acknowledge the webhook (worker stopped), the worker's to fulfil it (its start-up
	// included).
	APICPUMsPerWebhook       float64 `json:"api_cpu_ms_per_webhook"`
	WorkerCPUMsPerFulfilment float64 `json:"worker_cpu_ms_per_fulfilment"`
	// Postgres's (every server process) and Redis's, from the worker's start to the last
	// purchase.
	PostgresCPUMsPerFulfilment float64 `json:"postgres_cpu_ms_per_fulfilment"`
	RedisCPUMsPerFulfilment    float64 `json:"redis_cpu_ms_per_fulfilment"`
	// The api's in the same time (it follows the change feed), and the machine's, every process.
	APIDrainCPUMsPerFulfilment float64 `json:"api_drain_cpu_ms_per_fulfilment"`
	MachineCPUMsPerFulfilment  float64 `json:"machine_cpu_ms_per_fulfilment"`
}

// fulfilShop seeds a shop of its own for one fulfilment run, so counts and latencies are per run.
func fulfilShop(ctx context.Context, s *stack, tag string) (*tenant, error) {
	return s.seedTenant(ctx, "acct_bench_"+tag, true)
}

// benchFulfilment runs scenario 5: the floor, p.fulfilSessions at p.fulfilRate (above the
// worker's capacity on two shared cores: it measures the backlog), the same below capacity at
// p.fulfilLowRate, and the capacity.
func benchFulfilment(ctx context.Context, s *stack, p plan) (*Fulfilment, error) {
	n, rate := p.fulfilSessions, p.fulfilRate
	res := &Fulfilment{Sessions: n, RatePerSec: rate, TargetPerSec: 300, TargetP50: 50}
	pool, err := pgxpool.New(ctx, s.dbURL)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	shops := map[string]*tenant{}
	for _, tag := range []string{"floor", "fulfil", "low", "capacity"} {
		if shops[tag], err = fulfilShop(ctx, s, tag); err != nil {
			return nil, err
		}
	}
	if res.FloorTxPerSec, err = fulfilFloor(ctx, pool, shops["floor"], 8, p.fulfilFloorFor); err != nil {
		return nil, err
	}

	start := time.Now()
	b, err := postSessions(ctx, s, pool, shops["fulfil"], n, rate, p.fulfilWaitAtMost)
	if err != nil {
		return nil, err
	}
	res.PostFailures, res.Committed, res.Latency = b.failures, b.committed, b.latency
	res.ElapsedSeconds = b.finished.Sub(start).Seconds()
	res.PurchasesPerSec = float64(res.Committed) / res.ElapsedSeconds
	if res.FloorTxPerSec > 0 {
		res.Ratio = res.PurchasesPerSec / res.FloorTxPerSec
	}
	res.MetThroughput = res.PurchasesPerSec >= res.TargetPerSec && res.Committed == n
	res.MetP50 = res.Latency.N > 0 && res.Latency.P50 <= res.TargetP50

	s.logf("fulfilment below capacity: %d paid sessions at %.0f/s", p.fulfilLowSessions, p.fulfilLowRate)
	wait := s.profileDuring(ctx, "fulfil-low", time.Duration(float64(p.fulfilLowSessions)/p.fulfilLowRate*float64(time.Second)))
	low, err := postSessions(ctx, s, pool, shops["low"], p.fulfilLowSessions, p.fulfilLowRate, p.fulfilWaitAtMost)
	wait()
	if err != nil {
		return nil, err
	}
	res.BelowCapacity = &FulfilRun{
		Sessions: p.fulfilLowSessions, RatePerSec: p.fulfilLowRate, PostFailures: low.failures, Committed: low.committed,
		Latency: low.latency, TargetP50: 20, TargetP99: 100,
	}
	r := res.BelowCapacity
	r.Met = r.Committed == r.Sessions && r.PostFailures == 0 && r.Latency.N > 0 && r.Latency.P50 <= r.TargetP50 && r.Latency.P99 <= r.TargetP99
	s.logf("  below capacity: p50 %.1f ms, p99 %.1f ms", r.Latency.P50, r.Latency.P99)

	s.logf("fulfilment capacity: a backlog of %d paid sessions, drained", p.capacitySessions)
	if res.Capacity, err = fulfilCapacity(ctx, s, pool, shops["capacity"], p.capacitySessions, p.fulfilWaitAtMost); err != nil {
		return nil, err
	}
	s.logf("  capacity: %.0f purchases/s", res.Capacity.PurchasesPerSec)
	return res, nil
}

// batch is what postSessions measured.
type batch struct {
	failures  int // posts not answered 200
	committed int
	finished  time.Time // when the last purchase was seen committed (or the wait gave up)
	latency   Latency   // webhook posted -> purchase committed, per session
}

// postSessions posts n distinct paid sessions of shop (which has no purchases yet) at rate and
// waits at most timeout for their purchases.
func postSessions(ctx context.Context, s *stack, pool *pgxpool.Pool, shop *tenant, n int, rate float64, timeout time.Duration) (batch, error) {
	var b batch
	deliveries := paidDeliveries(shop, n, "ful")
	posted := make([]time.Time, n)
	start := time.Now()
	var (
		wg      sync.WaitGroup
		pollErr error
	)
	wg.Add(1)
	go func() { // every 10 ms, until every purchase is committed
		defer wg.Done()
		b.committed, b.finished, pollErr = waitPurchases(ctx, pool, shop, n, start.Add(timeout))
	}()
	r := openLoop{Rate: rate, N: n, Do: func(ctx context.Context, i int) error {
		posted[i] = time.Now()
		return s.postDelivery(ctx, deliveries[i])
	}}.run(ctx)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return b, err
	}
	if pollErr != nil {
		return b, pollErr
	}
	b.failures = r.Failed + r.Dropped
	if b.committed < n {
		s.logf("  fulfilment: only %d of %d purchases after %s", b.committed, n, timeout)
	}
	sent := make(map[string]time.Time, n)
	for i, d := range deliveries {
		sent[d.session] = posted[i]
	}
	var err error
	b.latency, err = purchaseLatency(ctx, pool, shop, sent)
	return b, err
}

// waitPurchases polls every 10 ms until shop has n purchases or deadline passes; it returns
// the last count and when it was read.
func waitPurchases(ctx context.Context, pool *pgxpool.Pool, shop *tenant, n int, deadline time.Time) (int, time.Time, error) {
	for {
		var c int
		err := pool.QueryRow(ctx, "SELECT count(*) FROM purchases WHERE tenant_id = $1", int64(shop.ID)).Scan(&c)
		if err != nil {
			return c, time.Now(), err
		}
		if c >= n || time.Now().After(deadline) || sleepCtx(ctx, 10*time.Millisecond) != nil {
			return c, time.Now(), nil
		}
	}
}

// purchaseLatency summarises, over shop's purchases, the time from its session's post (sent)
// to the purchase's created_at.
func purchaseLatency(ctx context.Context, pool *pgxpool.Pool, shop *tenant, sent map[string]time.Time) (Latency, error) {
	rows, err := pool.Query(ctx, "SELECT psp_checkout_session_id, created_at FROM purchases WHERE tenant_id = $1", int64(shop.ID))
	if err != nil {
		return Latency{}, err
	}
	var lat []time.Duration
	for rows.Next() {
		var (
			id string
			at time.Time
		)
		if err := rows.Scan(&id, &at); err != nil {
			return Latency{}, err
		}
		if t, ok := sent[id]; ok {
			lat = append(lat, max(0, at.Sub(t)))
		}
	}
	return summarize(lat), rows.Err()
}

// fulfilCapacity stops the worker, has n paid sessions of shop acknowledged (queued), starts
// the worker and measures how fast it commits their purchases.
func fulfilCapacity(ctx context.Context, s *stack, pool *pgxpool.Pool, shop *tenant, n int, timeout time.Duration) (*FulfilCapacity, error) {
	res := &FulfilCapacity{Sessions: n, TargetPerSec: 1000}
	s.worker.stop()
	deliveries := paidDeliveries(shop, n, "cap")
	apiCPU := cpuTime(s.api.pid())
	r := openLoop{Rate: 2000, N: n, Do: func(ctx context.Context, i int) error {
		return s.postDelivery(ctx, deliveries[i])
	}}.run(ctx)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if r.Failed+r.Dropped > 0 {
		return nil, fmt.Errorf("capacity: %d of %d posts failed: %s", r.Failed+r.Dropped, n, r.FirstErr)
	}
	res.APICPUMsPerWebhook = ms(cpuTime(s.api.pid())-apiCPU) / float64(n)
	pgCPU, redisCPU := treeCPUSeconds(s.pg.PID()), cpuTime(s.redisCmd.Process.Pid)
	apiDrainCPU, busy := cpuTime(s.api.pid()), machineBusySeconds()
	if err := s.startWorker(); err != nil {
		return nil, err
	}
	var err error
	if res.Committed, _, err = waitPurchases(ctx, pool, shop, n, time.Now().Add(timeout)); err != nil {
		return nil, err
	}
	committed := float64(max(1, res.Committed))
	res.WorkerCPUMsPerFulfilment = ms(cpuTime(s.worker.pid())) / committed
	res.PostgresCPUMsPerFulfilment = (treeCPUSeconds(s.pg.PID()) - pgCPU) * 1000 / committed
	res.RedisCPUMsPerFulfilment = ms(cpuTime(s.redisCmd.Process.Pid)-redisCPU) / committed
	res.APIDrainCPUMsPerFulfilment = ms(cpuTime(s.api.pid())-apiDrainCPU) / committed
	res.MachineCPUMsPerFulfilment = (machineBusySeconds() - busy) * 1000 / committed
	var first, last time.Time
	if err := pool.QueryRow(ctx, "SELECT min(created_at), max(created_at) FROM purchases WHERE tenant_id = $1",
		int64(shop.ID)).Scan(&first, &last); err != nil {
		return nil, err
	}
	res.DrainSeconds = last.Sub(first).Seconds()
	if res.Committed > 1 && res.DrainSeconds > 0 {
		res.PurchasesPerSec = float64(res.Committed-1) / res.DrainSeconds
	}
	res.Met = res.Committed == n && res.PurchasesPerSec >= res.TargetPerSec
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
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8) ON CONFLICT (tenant_id, psp_checkout_session_id) DO NOTHING RETURNING id`,
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

// runPaymentsPhase runs scenarios 5 and 4 (fulfilment, then the webhook with the worker
// fulfilling beside it) on a Postgres database of their own, with Redis emptied and a new api
// and worker, before every other scenario. Run after the others, as they once were, they
// inherited what those left: a tracked_events table of millions of rows and its autovacuum,
// the ingestion's backlog in the database, Postgres's checkpoints, and the api's heap.
func runPaymentsPhase(ctx context.Context, s *stack, p plan, rep *Report) error {
	if !p.runs("fulfil") && !p.runs("webhook") {
		return nil
	}
	url, err := s.postgresDatabase("bench_payments")
	if err != nil {
		return err
	}
	if err := s.startServices(ctx, url); err != nil {
		return err
	}
	defer s.stopServices()
	if p.runs("fulfil") {
		s.logf("fulfilment: %d paid sessions at %.0f/s", p.fulfilSessions, p.fulfilRate)
		if err := s.measure("fulfil", func() (err error) { rep.Fulfilment, err = benchFulfilment(ctx, s, p); return }); err != nil {
			return err
		}
	}
	if p.runs("webhook") {
		shop, err := fulfilShop(ctx, s, "ack")
		if err != nil {
			return err
		}
		s.logf("webhook: %.0f/s for %s (worker running)", p.webhookRate, p.webhookFor)
		err = s.measure("webhook", func() (err error) {
			rep.Webhook, err = benchWebhook(ctx, s, shop, p.webhookRate, p.webhookFor, p.webhookAloneFor)
			return
		})
		if err != nil {
			return err
		}
	}
	return nil
}
