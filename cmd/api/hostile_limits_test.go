package main

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eventq/eventq/internal/testenv"
)

// sessionCalls counts the provider calls that retrieved session cs.
func sessionCalls(fake *testenv.FakePSP, cs string) int {
	n := 0
	for _, c := range fake.Calls() {
		if c.Method == "GET" && strings.HasSuffix(c.Path, "/checkout/sessions/"+cs) {
			n++
		}
	}
	return n
}

// The unauthenticated return page cannot spend the platform's provider rate limit: one call a
// second per session at most, none once the session is fulfilled, and a budget per address.
func TestReturnPageSparesTheProvider(t *testing.T) {
	fake := testenv.StartFakePSP(t)
	e := startAPI(t, "PSP_API_BASE="+fake.URL, "PSP_SECRET_KEY=sk_test_x", "APP_URL="+checkoutAppURL,
		"TRUSTED_PROXIES=127.0.0.1", "RATE_LIMIT_RETURN=30/m")
	s := mustShop(t, e, true)
	cs := e.MustCheckout(t, s)
	visit := func(t *testing.T, from string) response {
		t.Helper()
		return e.Do(t, "GET", returnPath(s.ID, cs), "", nil, "Accept", "application/json", "X-Forwarded-For", from)
	}

	t.Run("concurrent visits to a pending session ask the provider once", func(t *testing.T) {
		var wg sync.WaitGroup
		start := time.Now()
		for i := 0; i < 10; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				if res := visit(t, fmt.Sprintf("192.0.2.%d", i)); res.Status != 200 || string(res.Body) != returnBody("pending", 0) {
					t.Errorf("visit %d: %d %s", i, res.Status, res.Body)
				}
			}(i)
		}
		wg.Wait()
		// Once a second: on a busy machine the ten visits may spread over more than one.
		took := time.Since(start)
		if n, most := sessionCalls(fake, cs), 1+int(took/time.Second); n < 1 || n > most {
			t.Fatalf("%d provider calls for 10 visits within %s, want 1 to %d", n, took.Round(time.Millisecond), most)
		}
	})
	fake.Pay(cs)
	t.Run("a paid session is fulfilled once the last answer is a second old", func(t *testing.T) {
		deadline := time.Now().Add(5 * time.Second)
		for {
			res := visit(t, "192.0.2.100")
			if res.Status == 200 && strings.Contains(string(res.Body), `"fulfilled"`) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("still %d %s", res.Status, res.Body)
			}
			time.Sleep(100 * time.Millisecond)
		}
		// At most one call per second while polling (about 1 s of polling at 10 a second).
		if n := sessionCalls(fake, cs); n > 3 {
			t.Fatalf("%d provider calls", n)
		}
	})
	t.Run("a fulfilled session is answered from the database", func(t *testing.T) {
		before := sessionCalls(fake, cs)
		for i := 0; i < 3; i++ {
			time.Sleep(400 * time.Millisecond) // past the last answer's second: only the database can answer
			if res := visit(t, "192.0.2.101"); res.Status != 200 || !strings.Contains(string(res.Body), `"already_fulfilled"`) {
				t.Fatalf("%d %s", res.Status, res.Body)
			}
		}
		if n := sessionCalls(fake, cs) - before; n != 0 {
			t.Fatalf("%d provider calls for a fulfilled session", n)
		}
	})
	t.Run("an address has its own budget", func(t *testing.T) {
		for i := 0; i < 30; i++ {
			if res := visit(t, "198.51.100.7"); res.Status != 200 {
				t.Fatalf("visit %d: %d", i+1, res.Status)
			}
		}
		res := visit(t, "198.51.100.7")
		assertBody(t, res, 429, `{"message":"Too Many Attempts."}`)
		if res.Header.Get("Retry-After") == "" {
			t.Fatal("no Retry-After")
		}
		if res := visit(t, "198.51.100.8"); res.Status != 200 {
			t.Fatalf("another address: %d", res.Status)
		}
	})
}

// Failed authentications are limited per address: past the limit a token that does not verify
// is answered 429, and a valid one is still served, even one this process has never seen.
func TestFailedAuthenticationsAreLimitedPerAddress(t *testing.T) {
	e := startAPI(t, "TRUSTED_PROXIES=127.0.0.1", "RATE_LIMIT_AUTH_FAILURES=3/m")
	tn := testenv.MustTenant(t, e.DB, true)
	id, _, _ := strings.Cut(tn.Token, "|")
	wrong := id + "|" + strings.Repeat("x", 40)
	from := func(addr string) []string { return []string{"X-Forwarded-For", addr} }
	for i := 0; i < 3; i++ {
		res := e.Do(t, "GET", "/api/platform/events", wrong, nil, from("203.0.113.5")...)
		assertBody(t, res, 401, `{"message":"Unauthenticated."}`)
		if res.Header.Get("Retry-After") != "" || res.Header.Get("X-RateLimit-Limit") != "" {
			t.Fatalf("a 401 with limit headers: %v", res.Header)
		}
	}
	for _, token := range []string{wrong, "garbage", "999999|" + strings.Repeat("y", 40)} {
		res := e.Do(t, "GET", "/api/platform/events", token, nil, from("203.0.113.5")...)
		assertBody(t, res, 429, `{"message":"Too Many Attempts."}`)
		if res.Header.Get("Retry-After") == "" {
			t.Fatal("no Retry-After")
		}
	}
	t.Run("a valid token is served past the budget", func(t *testing.T) {
		if res := e.Do(t, "GET", "/api/platform/events", tn.Token, nil, from("203.0.113.5")...); res.Status != 200 {
			t.Fatalf("a valid token never seen before: %d %s", res.Status, res.Body)
		}
	})
	t.Run("another address is not limited", func(t *testing.T) {
		assertBody(t, e.Do(t, "GET", "/api/platform/events", wrong, nil, from("203.0.113.6")...), 401, `{"message":"Unauthenticated."}`)
		if res := e.Do(t, "GET", "/api/platform/events", tn.Token, nil, from("203.0.113.6")...); res.Status != 200 {
			t.Fatalf("a valid token from another address: %d %s", res.Status, res.Body)
		}
	})
	t.Run("a request without a token spends nothing", func(t *testing.T) {
		for i := 0; i < 5; i++ {
			assertBody(t, e.Do(t, "GET", "/api/platform/events", "", nil, from("203.0.113.7")...), 401, `{"message":"Unauthenticated."}`)
		}
		assertBody(t, e.Do(t, "GET", "/api/platform/events", wrong, nil, from("203.0.113.7")...), 401, `{"message":"Unauthenticated."}`)
	})
}

// The lock-out an outsider could cause: from one address (one NAT, one ingress), a flood of
// wrong platform and operator tokens. Afterwards valid tokens of both kinds are served,
// including a platform token the api has never seen; wrong ones get 429. The operator's
// failures and the platform's are counted apart.
func TestAFloodOfWrongTokensLocksNoValidTokenOut(t *testing.T) {
	e := startAPI(t, "TRUSTED_PROXIES=127.0.0.1", "RATE_LIMIT_AUTH_FAILURES=5/m", "ADMIN_API_TOKENS="+adminToken)
	seen := testenv.MustTenant(t, e.DB, true)
	addr := []string{"X-Forwarded-For", "198.51.100.77"}
	if res := e.Do(t, "GET", "/api/platform/events", seen.Token, nil, addr...); res.Status != 200 {
		t.Fatalf("before the flood: %d", res.Status)
	}
	t.Run("the operator's failures do not spend the platform's", func(t *testing.T) {
		for i := 0; i < 5; i++ {
			assertBody(t, e.Do(t, "GET", "/api/admin/tenants", "wrong-operator-token", nil, addr...), 401, `{"message":"Unauthenticated."}`)
		}
		assertBody(t, e.Do(t, "GET", "/api/admin/tenants", "wrong-operator-token", nil, addr...), 429, `{"message":"Too Many Attempts."}`)
		assertBody(t, e.Do(t, "GET", "/api/platform/events", "1|wrong", nil, addr...), 401, `{"message":"Unauthenticated."}`)
	})
	for i := 0; i < 100; i++ {
		e.Do(t, "GET", "/api/platform/events", fmt.Sprintf("%d|%040d", i, i), nil, addr...)
		e.Do(t, "GET", "/api/admin/tenants", fmt.Sprintf("adm_%040d", i), nil, addr...)
	}
	assertBody(t, e.Do(t, "GET", "/api/platform/events", "1|wrong", nil, addr...), 429, `{"message":"Too Many Attempts."}`)
	assertBody(t, e.Do(t, "GET", "/api/admin/tenants", "wrong", nil, addr...), 429, `{"message":"Too Many Attempts."}`)

	unseen := testenv.MustTenant(t, e.DB, true)
	for name, call := range map[string][2]string{
		"a platform token seen before": {"/api/platform/events", seen.Token},
		"a platform token never seen":  {"/api/platform/events", unseen.Token},
		"the operator's token":         {"/api/admin/tenants", adminToken},
	} {
		if res := e.Do(t, "GET", call[0], call[1], nil, addr...); res.Status != 200 {
			t.Errorf("%s: %d %s", name, res.Status, res.Body)
		}
	}
}

// An IPv6 client's tracking budget is its /64's: addresses in one /64 share it.
func TestTrackBudgetKeysIPv6ByItsSlash64(t *testing.T) {
	testenv.OnOneDatabase(t)
	e := startAPI(t, "TRUSTED_PROXIES=127.0.0.1", "RATE_LIMIT_TRACK_IP=2/m", "RATE_LIMIT_TRACK=off")
	tn := testenv.MustTenant(t, e.DB, true)
	post := func(addr string) response {
		return e.Do(t, "POST", "/api/track", "", trackBody(tn, 1), "X-Forwarded-For", addr)
	}
	for _, addr := range []string{"2001:db8:1:2::1", "2001:db8:1:2:ffff:ffff:ffff:fffe"} {
		if res := post(addr); res.Status != 202 {
			t.Fatalf("%s: %d", addr, res.Status)
		}
	}
	assertBody(t, post("2001:db8:1:2::abcd"), 429, `{"message":"Too Many Attempts."}`)
	if res := post("2001:db8:1:3::1"); res.Status != 202 {
		t.Fatalf("the next /64: %d", res.Status)
	}
	if rows := e.EventRows(t, tn); rows != 3 {
		t.Fatalf("%d rows, want 3", rows)
	}
}
