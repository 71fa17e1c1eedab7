package routes

import (
	"io"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/eventq/eventq/internal/clock"
	"github.com/eventq/eventq/internal/config"
	"github.com/eventq/eventq/internal/ratelimit"
	"github.com/eventq/eventq/internal/testenv"
)

// The limiter's clock, not the system's, decides Retry-After and X-RateLimit-Reset: a fake
// clock years ahead gives a reset time in its own years, and moving it frees the budget.
// A body without a site key spends the address's budget only and is answered 422 when
// allowed, so the route needs no tenant.
func TestTrackLimitFollowsTheLimitersClock(t *testing.T) {
	r := testenv.StartRedis(t)
	now := time.Date(2031, 3, 1, 8, 0, 0, 0, time.UTC)
	clk := clock.NewFake(now)
	limiter := ratelimit.New(r.Client(), clk, nil)
	limiter.Timeout = time.Minute // no check let through unchecked on a busy machine
	app := New(&Server{Guard: Guard{
		Limiter: limiter,
		Limits:  config.Limits{TrackIP: config.Rate{N: 2, Period: time.Minute}, Track: config.Rate{N: 1000, Period: time.Second}},
	}})
	post := func(t *testing.T) (status int, body string, header func(string) string) {
		t.Helper()
		req := httptest.NewRequest("POST", "/api/track", strings.NewReader(`{"events":[]}`))
		req.Header.Set("Content-Type", "application/json")
		res, err := app.Test(req, -1)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b), res.Header.Get
	}
	for i := 0; i < 2; i++ {
		status, _, h := post(t)
		if status != 422 || h("X-RateLimit-Limit") != "2" || h("X-RateLimit-Remaining") != strconv.Itoa(1-i) {
			t.Fatalf("request %d: %d, limit %q, remaining %q", i+1, status, h("X-RateLimit-Limit"), h("X-RateLimit-Remaining"))
		}
	}
	status, body, h := post(t)
	if status != 429 || body != `{"message":"Too Many Attempts."}` {
		t.Fatalf("third request: %d %s", status, body)
	}
	if h("Retry-After") != "30" || h("X-RateLimit-Reset") != strconv.FormatInt(now.Unix()+30, 10) || h("X-RateLimit-Remaining") != "0" {
		t.Fatalf("third request: Retry-After %q, X-RateLimit-Reset %q (want 30 and %d), remaining %q",
			h("Retry-After"), h("X-RateLimit-Reset"), now.Unix()+30, h("X-RateLimit-Remaining"))
	}
	clk.Advance(29 * time.Second)
	if status, _, h := post(t); status != 429 || h("Retry-After") != "1" || h("X-RateLimit-Reset") != strconv.FormatInt(now.Unix()+30, 10) {
		t.Fatalf("29 s later: %d, Retry-After %q, X-RateLimit-Reset %q", status, h("Retry-After"), h("X-RateLimit-Reset"))
	}
	clk.Advance(time.Second)
	if status, _, _ := post(t); status != 422 {
		t.Fatalf("30 s later: %d, want the budget free again (422 for the body)", status)
	}
}

func TestBudgetKeyIsTheAddressOrItsSlash64(t *testing.T) {
	for in, want := range map[string]string{
		"192.0.2.1":            "192.0.2.1",
		"::ffff:192.0.2.1":     "::ffff:192.0.2.1",
		"2001:db8:1:2:3:4:5:6": "2001:db8:1:2::/64",
		"2001:db8:1:2::":       "2001:db8:1:2::/64",
		"fe80::1%eth0":         "fe80::/64",
		"not an address":       "not an address",
	} {
		if got := budgetKey(in); got != want {
			t.Errorf("budgetKey(%q) = %q, want %q", in, got, want)
		}
	}
}
