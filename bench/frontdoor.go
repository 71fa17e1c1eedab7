package main

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stripe/stripe-go/v76"

	"github.com/eventq/eventq/internal/paginate"
	"github.com/eventq/eventq/internal/psp"
	"github.com/eventq/eventq/models"
)

// FrontDoor is the members, products and entitlements scenario: the entitlement check (a
// paywalled site asks it on every page view) against the HTTP floor, how soon a refund ends
// an entitlement on another api process, and members in a tenant that has a million of them.
type FrontDoor struct {
	// The check's highest sustained rate (members drawn from Members, each entitled) and the
	// floor's, GET /bench/page with a body of the check's size, same generator.
	Members      int         `json:"members_checked"`
	Check        *RateSearch `json:"check"`
	Floor        *RateSearch `json:"http_floor"`
	CheckAt80    *FixedRate  `json:"check_at_80_percent"`
	FloorAt80    *FixedRate  `json:"floor_at_the_checks_80_percent"`
	CheckAt20    *FixedRate  `json:"check_at_20_percent"`
	FloorAt20    *FixedRate  `json:"floor_at_the_checks_20_percent"`
	RatioToFloor float64     `json:"ratio_to_floor"`
	TargetRatio  float64     `json:"target_ratio_min"`
	// The check's p99 at 80% of its capacity against the floor's at the same rate: the
	// absolute milliseconds are not reachable on two shared cores, by the floor either.
	TargetP99Ratio float64 `json:"target_p99_ratio_to_floor_max"`

	// From a refund webhook's 200 on one api process to the check answering 404 on another.
	Revocations       int     `json:"revocations"`
	RevocationLatency Latency `json:"refund_to_404_ms"`
	TargetRevocation  float64 `json:"target_refund_to_404_p99_ms_max"`

	// A tenant with BigMembers members: creates a second through the api, and a list page at
	// the front and deep in (keyset pages: the same work).
	BigMembers         int     `json:"tenant_members"`
	CreatesPerSec      float64 `json:"member_creates_per_second"`
	CreateLatency      Latency `json:"member_create"`
	DeepPage           int     `json:"deep_page"`
	ListFirst          Latency `json:"list_page_1"`
	ListDeep           Latency `json:"list_deep_page"`
	ListRatio          float64 `json:"list_deep_over_first_p50"`
	TargetListRatio    float64 `json:"target_list_ratio_max"`
	Met                bool    `json:"met"`
	SeedSeconds        float64 `json:"seed_seconds"`
	MembersPerPage     int     `json:"per_page"`
	ListSamplesPerPage int     `json:"list_samples"`
}

// frontDoorPlan sizes the scenario.
type frontDoorPlan struct {
	members     int // members the check draws from
	revocations int
	bigMembers  int
	createFor   time.Duration
	listSamples int
}

var (
	fullFrontDoor  = frontDoorPlan{members: 2000, revocations: 40, bigMembers: 1_000_000, createFor: 5 * time.Second, listSamples: 100}
	quickFrontDoor = frontDoorPlan{members: 200, revocations: 5, bigMembers: 20_000, createFor: time.Second, listSamples: 10}
)

// benchFrontDoor runs the scenario on the running services (Postgres).
func benchFrontDoor(ctx context.Context, s *stack, p frontDoorPlan, ingest ingestPlan) (*FrontDoor, error) {
	res := &FrontDoor{Members: p.members, TargetRatio: 0.6, TargetP99Ratio: 1.2, TargetRevocation: 1000, TargetListRatio: 1.5,
		BigMembers: p.bigMembers, MembersPerPage: paginate.DefaultPerPage, ListSamplesPerPage: p.listSamples}
	shop, err := s.seedTenant(ctx, "acct_bench_front_door", false)
	if err != nil {
		return nil, err
	}
	paths, err := s.seedEntitled(ctx, shop, p.members)
	if err != nil {
		return nil, err
	}
	s.logf("front door: the entitlement check over %d members against GET /bench/page", p.members)
	check := func(ctx context.Context, i int) error {
		return expect(s.http, s.request(ctx, "GET", paths[i%len(paths)], shop.Token, nil), 200)
	}
	size, err := s.bodySize(ctx, paths[0], shop.Token)
	if err != nil {
		return nil, err
	}
	floor := func(ctx context.Context, _ int) error {
		return expect(s.http, s.request(ctx, "GET", "/bench/page?bytes="+strconv.Itoa(size), "", nil), 200)
	}
	none := func(context.Context) (int64, error) { return 0, nil } // no second chance: see secondChance
	// The check's search, then the check at 80% of its rate and the floor at that same rate
	// (before the floor's own search overloads the api), then the floor's search.
	if res.Check, err = searchRate(ctx, s, "entitlement check", 1, ingest, check, none); err != nil {
		return nil, err
	}
	if res.Check.RequestsPerSec > 0 {
		// A pause first: the search's last step overloaded the api, and what it left queued
		// would be the first second's tail.
		if err := sleepCtx(ctx, 2*time.Second); err != nil {
			return nil, err
		}
		for _, m := range []struct {
			fraction   float64
			check, flo **FixedRate
		}{{0.8, &res.CheckAt80, &res.FloorAt80}, {0.2, &res.CheckAt20, &res.FloorAt20}} {
			rate := m.fraction * res.Check.RequestsPerSec
			if *m.check, err = atFraction(ctx, s, "entitlement check", 1, rate, ingest, check); err != nil {
				return nil, err
			}
			if *m.flo, err = atFraction(ctx, s, "http floor (GET)", 1, rate, ingest, floor); err != nil {
				return nil, err
			}
		}
	}
	if res.Floor, err = searchRate(ctx, s, "http floor (GET)", 1, ingest, floor, nil); err != nil {
		return nil, err
	}
	if res.Floor.RequestsPerSec > 0 {
		res.RatioToFloor = res.Check.RequestsPerSec / res.Floor.RequestsPerSec
	}

	if res.RevocationLatency, err = benchRevocations(ctx, s, shop, p.revocations); err != nil {
		return nil, err
	}
	res.Revocations = p.revocations
	if err := benchBigTenant(ctx, s, p, res); err != nil {
		return nil, err
	}
	res.Met = res.RatioToFloor >= res.TargetRatio && res.p99Met() &&
		res.RevocationLatency.P99 <= res.TargetRevocation && res.ListRatio <= res.TargetListRatio
	return res, nil
}

// seedEntitled gives shop n members, each with a paid purchase of its product and the
// entitlement it grants (the rows fulfilment writes), and returns each one's check path.
func (s *stack) seedEntitled(ctx context.Context, shop *tenant, n int) ([]string, error) {
	db := s.db.WithContext(ctx)
	now := time.Now().UTC()
	members := make([]models.AudienceMember, n)
	for i := range members {
		members[i] = models.AudienceMember{TenantID: shop.ID, Email: fmt.Sprintf("reader%d@example.com", i), CreatedAt: now, UpdatedAt: now}
	}
	if err := db.CreateInBatches(members, 500).Error; err != nil {
		return nil, err
	}
	purchases := make([]models.Purchase, n)
	for i, m := range members {
		purchases[i] = models.Purchase{TenantID: shop.ID, AudienceMemberID: m.ID, ProductID: shop.Product.ID,
			PSPCheckoutSessionID: psp.NewID("cs_bench"), PSPPaymentIntentID: psp.NewID("pi"), AmountTotal: shop.Product.Amount,
			Currency: shop.Product.Currency, Status: models.PurchasePaid, CreatedAt: now, UpdatedAt: now}
	}
	if err := db.CreateInBatches(purchases, 500).Error; err != nil {
		return nil, err
	}
	ents := make([]models.Entitlement, n)
	paths := make([]string, n)
	for i, p := range purchases {
		ents[i] = models.Entitlement{TenantID: shop.ID, AudienceMemberID: p.AudienceMemberID, ProductID: p.ProductID, PurchaseID: p.ID, CreatedAt: now, UpdatedAt: now}
		paths[i] = fmt.Sprintf("/api/platform/members/%d/entitlements/%d", p.AudienceMemberID, p.ProductID)
	}
	return paths, db.CreateInBatches(ents, 500).Error
}

// grant writes a paid purchase of shop's product by member, with payment intent pi, and its
// entitlement.
func (s *stack) grant(ctx context.Context, shop *tenant, member uint64, pi string) (*models.Entitlement, error) {
	db := s.db.WithContext(ctx)
	now := time.Now().UTC()
	p := models.Purchase{TenantID: shop.ID, AudienceMemberID: member, ProductID: shop.Product.ID,
		PSPCheckoutSessionID: psp.NewID("cs_bench"), PSPPaymentIntentID: pi, AmountTotal: shop.Product.Amount,
		Currency: shop.Product.Currency, Status: models.PurchasePaid, CreatedAt: now, UpdatedAt: now}
	if err := db.Create(&p).Error; err != nil {
		return nil, err
	}
	e := models.Entitlement{TenantID: shop.ID, AudienceMemberID: member, ProductID: shop.Product.ID, PurchaseID: p.ID, CreatedAt: now, UpdatedAt: now}
	return &e, db.Create(&e).Error
}

// bodySize is the length of GET path's answer.
func (s *stack) bodySize(ctx context.Context, path, token string) (int, error) {
	res, err := s.http.Do(s.request(ctx, "GET", path, token, nil))
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	var n int
	buf := make([]byte, 4096)
	for {
		k, err := res.Body.Read(buf)
		n += k
		if err != nil {
			break
		}
	}
	if res.StatusCode != 200 {
		return 0, fmt.Errorf("GET %s: %d", path, res.StatusCode)
	}
	return n, nil
}

// benchRevocations measures, n times, the time from a signed charge.refunded webhook's 200 on
// the api to the entitlement check answering 404 on a second api process that had answered
// 200 (its caches warm), with the worker revoking in between.
func benchRevocations(ctx context.Context, s *stack, shop *tenant, n int) (Latency, error) {
	side, base, err := s.startSideAPI(ctx, "revocations", nil)
	if err != nil {
		return Latency{}, err
	}
	defer side.stop()
	s.logf("front door: %d refunds, each from the webhook's 200 to 404 on another api process", n)
	var samples []time.Duration
	for i := 0; i < n; i++ {
		m := models.AudienceMember{TenantID: shop.ID, Email: fmt.Sprintf("refunded%d@example.com", i)}
		if err := s.db.WithContext(ctx).Create(&m).Error; err != nil {
			return Latency{}, err
		}
		pi := psp.NewID("pi")
		if _, err := s.grant(ctx, shop, m.ID, pi); err != nil {
			return Latency{}, err
		}
		path := fmt.Sprintf("/api/platform/members/%d/entitlements/%d", m.ID, shop.Product.ID)
		if _, err := pollStatus(ctx, s, base, path, shop.Token, 200, 5*time.Second); err != nil {
			return Latency{}, err
		}
		now := time.Now()
		ch := psp.ChargeObject{ID: psp.NewID("ch"), Object: "charge", Amount: shop.Product.Amount, AmountRefunded: shop.Product.Amount,
			Currency: shop.Product.Currency, PaymentIntent: pi, Refunded: true, Created: now.Unix()}
		_, payload := psp.NewObjectEvent(stripe.EventTypeChargeRefunded, *shop.PSPAccountID, ch, now)
		if err := s.postDelivery(ctx, delivery{payload: payload, sig: psp.Sign(payload, webhookSecret, now)}); err != nil {
			return Latency{}, err
		}
		took, err := pollStatus(ctx, s, base, path, shop.Token, 404, 10*time.Second)
		if err != nil {
			return Latency{}, err
		}
		samples = append(samples, took)
	}
	l := summarize(samples)
	s.logf("  refund to 404 elsewhere: p50 %.0f ms, p99 %.0f ms, max %.0f ms", l.P50, l.P99, l.Max)
	return l, nil
}

// pollStatus asks GET base+path every 5 ms until it answers status, and returns how long that
// took.
func pollStatus(ctx context.Context, s *stack, base, path, token string, status int, within time.Duration) (time.Duration, error) {
	start := time.Now()
	for {
		res, err := s.http.Do(s.requestTo(ctx, base, "GET", path, token, nil))
		if err == nil {
			res.Body.Close()
			if res.StatusCode == status {
				return time.Since(start), nil
			}
		}
		if time.Since(start) > within {
			return 0, fmt.Errorf("GET %s did not answer %d within %s", path, status, within)
		}
		if err := sleepCtx(ctx, 5*time.Millisecond); err != nil {
			return 0, err
		}
	}
}

// benchBigTenant fills a tenant with p.bigMembers members, then measures member creates
// through the api and list pages at the front and deep in.
func benchBigTenant(ctx context.Context, s *stack, p frontDoorPlan, res *FrontDoor) error {
	big, err := s.seedTenant(ctx, "", false)
	if err != nil {
		return err
	}
	s.logf("front door: %d members in one tenant", p.bigMembers)
	start := time.Now()
	err = s.db.WithContext(ctx).Exec(`INSERT INTO audience_members (tenant_id, email, name, created_at, updated_at)
		SELECT ?, 'm' || g || '@example.com', '', now(), now() FROM generate_series(1, ?) AS g`, big.ID, p.bigMembers).Error
	if err != nil {
		return err
	}
	if err := s.db.WithContext(ctx).Exec("ANALYZE audience_members").Error; err != nil {
		return err
	}
	res.SeedSeconds = time.Since(start).Seconds()

	var (
		created  atomic.Int64
		mu       sync.Mutex
		lat      []time.Duration
		firstErr error
		wg       sync.WaitGroup
	)
	deadline := time.Now().Add(p.createFor)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; time.Now().Before(deadline); i++ {
				body := []byte(fmt.Sprintf(`{"email":"new-%d-%d@example.com","external_id":"ext-%d-%d"}`, w, i, w, i))
				req := s.request(ctx, "POST", "/api/platform/members", big.Token, body)
				req.Header.Set("Content-Type", "application/json")
				t0 := time.Now()
				err := expect(s.http, req, 201)
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				lat = append(lat, time.Since(t0))
				mu.Unlock()
				if err == nil {
					created.Add(1)
				}
			}
		}(w)
	}
	wg.Wait()
	if firstErr != nil {
		return fmt.Errorf("member create: %w", firstErr)
	}
	res.CreatesPerSec, res.CreateLatency = float64(created.Load())/p.createFor.Seconds(), summarize(lat)

	// The deep page: page 10,000 at the default 15 a page, or the last whole page of a smaller
	// tenant, reached by the cursor its previous page's next_cursor would be.
	perPage := paginate.DefaultPerPage
	res.DeepPage = min(10_000, p.bigMembers/perPage)
	var after uint64
	err = s.db.WithContext(ctx).Raw(`SELECT id FROM audience_members WHERE tenant_id = ? ORDER BY id OFFSET ? LIMIT 1`,
		big.ID, (res.DeepPage-1)*perPage-1).Scan(&after).Error
	if err != nil {
		return err
	}
	deep := "/api/platform/members?cursor=" + paginate.Cursor{ID: after, Next: true}.Encode()
	if res.ListFirst, err = sampleGET(ctx, s, "/api/platform/members", big.Token, p.listSamples); err != nil {
		return err
	}
	if res.ListDeep, err = sampleGET(ctx, s, deep, big.Token, p.listSamples); err != nil {
		return err
	}
	if res.ListFirst.P50 > 0 {
		res.ListRatio = res.ListDeep.P50 / res.ListFirst.P50
	}
	s.logf("  %.0f member creates/s (p99 %.1f ms); list page 1 p50 %.2f ms, page %d p50 %.2f ms (%.2f×)",
		res.CreatesPerSec, res.CreateLatency.P99, res.ListFirst.P50, res.DeepPage, res.ListDeep.P50, res.ListRatio)
	return nil
}

// sampleGET times n sequential GETs of path, alternating nothing else, after one warm-up.
func sampleGET(ctx context.Context, s *stack, path, token string, n int) (Latency, error) {
	var lat []time.Duration
	for i := 0; i <= n; i++ {
		t0 := time.Now()
		if err := expect(s.http, s.request(ctx, "GET", path, token, nil), http.StatusOK); err != nil {
			return Latency{}, err
		}
		if i > 0 {
			lat = append(lat, time.Since(t0))
		}
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	return summarize(lat), nil
}

// runFrontDoorPhase runs the front door scenario on a Postgres database of its own.
func runFrontDoorPhase(ctx context.Context, s *stack, p plan, rep *Report) error {
	if !p.runs("frontdoor") {
		return nil
	}
	url, err := s.postgresDatabase("frontdoor")
	if err != nil {
		return err
	}
	if err := s.startServices(ctx, url); err != nil {
		return err
	}
	defer s.stopServices()
	return s.measure("frontdoor", func() (err error) { rep.FrontDoor, err = benchFrontDoor(ctx, s, p.frontDoor, p.ingest); return })
}

// p99Ratio is the check's p99 at 80% of its capacity over the floor's at the same rate; 0
// when either is missing.
func (f *FrontDoor) p99Ratio() float64 {
	if f.CheckAt80 == nil || f.FloorAt80 == nil || f.FloorAt80.Latency.P99 <= 0 {
		return 0
	}
	return f.CheckAt80.Latency.P99 / f.FloorAt80.Latency.P99
}

// p99Met reports whether the check's p99 at 80% is within TargetP99Ratio of the floor's.
func (f *FrontDoor) p99Met() bool {
	r := f.p99Ratio()
	return r > 0 && r <= f.TargetP99Ratio
}

func (f *FrontDoor) rows(add func(scenario, metric string, value float64, floor, ratio *float64, target string, met *bool)) {
	v := func(x float64) *float64 { return &x }
	b := func(x bool) *bool { return &x }
	name := fmt.Sprintf("entitlement check (%d members)", f.Members)
	if f.Check != nil && f.Floor != nil {
		add(name, "requests/s sustained (floor: GET /bench/page, same size)", f.Check.RequestsPerSec, v(f.Floor.RequestsPerSec), v(f.RatioToFloor),
			fmt.Sprintf("≥ %.1f×", f.TargetRatio), b(f.RatioToFloor >= f.TargetRatio))
	}
	if a := f.CheckAt80; a != nil {
		var fl50, fl99, ratio *float64
		if fl := f.FloorAt80; fl != nil {
			fl50, fl99 = v(fl.Latency.P50), v(fl.Latency.P99)
		}
		if r := f.p99Ratio(); r > 0 {
			ratio = v(r)
		}
		add(name, "p50 ms at 80% (floor: the same rate)", a.Latency.P50, fl50, nil, "", nil)
		add(name, "p99 ms at 80% (floor: the same rate)", a.Latency.P99, fl99, ratio, fmt.Sprintf("≤ %.1f×", f.TargetP99Ratio), b(f.p99Met()))
		add(name, "api CPU µs per check at 80% (floor: the same rate)", a.APICPUMicrosPerReq, nilIfZero(f.FloorAt80), nil, "", nil)
	}
	if a, fl := f.CheckAt20, f.FloorAt20; a != nil && fl != nil {
		add(name, fmt.Sprintf("p99 ms at 20%%, %.0f/s (floor: the same rate)", a.OfferedRequestsPerSec), a.Latency.P99, v(fl.Latency.P99), nil, "", nil)
	}
	add("refund → check 404 on another api", fmt.Sprintf("p99 ms of %d", f.Revocations), f.RevocationLatency.P99, nil, nil,
		fmt.Sprintf("≤ %.0f ms", f.TargetRevocation), b(f.RevocationLatency.P99 <= f.TargetRevocation))
	add("refund → check 404 on another api", "p50 ms", f.RevocationLatency.P50, nil, nil, "", nil)
	name = fmt.Sprintf("members (%dk in the tenant)", f.BigMembers/1000)
	add(name, "creates/s through the api (8 clients)", f.CreatesPerSec, nil, nil, "", nil)
	add(name, "create p99 ms", f.CreateLatency.P99, nil, nil, "", nil)
	add(name, fmt.Sprintf("list page %d p50 ms (beside: page 1)", f.DeepPage), f.ListDeep.P50, v(f.ListFirst.P50), v(f.ListRatio),
		fmt.Sprintf("≤ %.1f×", f.TargetListRatio), b(f.ListRatio <= f.TargetListRatio))
}

// nilIfZero is the api CPU per request of r, or nil without r.
func nilIfZero(r *FixedRate) *float64 {
	if r == nil {
		return nil
	}
	return &r.APICPUMicrosPerReq
}
