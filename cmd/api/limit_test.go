package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/eventq/eventq/internal/psp"
	"github.com/eventq/eventq/internal/testenv"
)

func trackBody(tn tenant, n int) []byte {
	events := make([]any, n)
	for i := range events {
		events[i] = pageView("s", i)
	}
	b, _ := json.Marshal(map[string]any{"site_key": tn.SiteKey, "events": events})
	return b
}

// Two api processes share one budget per site key: the sixth request of a 5/m budget is
// refused whichever process gets it, with Laravel's headers, and nothing of it is stored.
func TestRateLimitIsSharedByEveryAPIProcess(t *testing.T) {
	testenv.OnOneDatabase(t)
	limits := []string{"RATE_LIMIT_TRACK=5/m", "RATE_LIMIT_TRACK_IP=off"}
	a := startAPI(t, limits...)
	b := startAPIOn(t, a.Redis, a.DB, a.Main.Config.DatabaseURL, limits...)
	tn, other := testenv.MustTenant(t, a.DB, true), testenv.MustTenant(t, a.DB, true)
	for i := 0; i < 5; i++ {
		api := []*apiEnv{a, b}[i%2]
		res := api.Do(t, "POST", "/api/track", "", trackBody(tn, 100)) // 100 events count as one request
		if res.Status != 202 || res.Header.Get("X-RateLimit-Limit") != "5" || res.Header.Get("X-RateLimit-Remaining") != strconv.Itoa(4-i) {
			t.Fatalf("request %d: %d, limit %q, remaining %q", i+1, res.Status, res.Header.Get("X-RateLimit-Limit"), res.Header.Get("X-RateLimit-Remaining"))
		}
	}
	before := time.Now().Unix()
	res := b.Do(t, "POST", "/api/track", "", trackBody(tn, 1))
	assertBody(t, res, 429, `{"message":"Too Many Attempts."}`)
	retry, _ := strconv.ParseInt(res.Header.Get("Retry-After"), 10, 64)
	reset, _ := strconv.ParseInt(res.Header.Get("X-RateLimit-Reset"), 10, 64)
	if retry < 1 || retry > 60 || reset < before+retry || reset > time.Now().Unix()+retry || res.Header.Get("X-RateLimit-Remaining") != "0" {
		t.Fatalf("429 headers %v", res.Header)
	}
	if rows, n := a.EventRows(t, tn), a.QueueLen(t, tn); rows != 500 || n != 500 {
		t.Fatalf("%d rows, %d queued, want the 500 events of the five allowed requests", rows, n)
	}
	if res := a.Do(t, "POST", "/api/track", "", trackBody(other, 1)); res.Status != 202 {
		t.Fatalf("another site key was refused: %d %s", res.Status, res.Body)
	}
}

func TestRateLimitsPerAddressAndToken(t *testing.T) {
	testenv.OnOneDatabase(t)
	e := startAPI(t, "RATE_LIMIT_TRACK=off", "RATE_LIMIT_TRACK_IP=3/m", "RATE_LIMIT_PLATFORM=2/m")
	t1, t2 := testenv.MustTenant(t, e.DB, true), testenv.MustTenant(t, e.DB, true)

	t.Run("one address shares its budget across site keys", func(t *testing.T) {
		for i, tn := range []tenant{t1, t2, t1} {
			if res := e.Do(t, "POST", "/api/track", "", trackBody(tn, 1)); res.Status != 202 {
				t.Fatalf("request %d: %d", i+1, res.Status)
			}
		}
		assertBody(t, e.Do(t, "POST", "/api/track", "", trackBody(t2, 1)), 429, `{"message":"Too Many Attempts."}`)
		if rows := e.EventRows(t, t2); rows != 1 {
			t.Fatalf("%d rows of the second tenant, want 1", rows)
		}
	})
	t.Run("a token has its own budget on the platform routes", func(t *testing.T) {
		for i := 0; i < 2; i++ {
			if res := e.Do(t, "GET", "/api/platform/events", t1.Token, nil); res.Status != 200 || res.Header.Get("X-RateLimit-Limit") != "2" {
				t.Fatalf("read %d: %d %v", i+1, res.Status, res.Header)
			}
		}
		before := e.QueueLen(t, t1)
		assertBody(t, e.Do(t, "DELETE", "/api/platform/events?count=1", t1.Token, nil), 429, `{"message":"Too Many Attempts."}`)
		if e.QueueLen(t, t1) != before {
			t.Fatal("a refused trim removed events")
		}
		if res := e.Do(t, "GET", "/api/platform/events", t2.Token, nil); res.Status != 200 {
			t.Fatalf("another token was refused: %d", res.Status)
		}
	})
	t.Run("a body that does not decode spends the address's budget", func(t *testing.T) {
		e.Redis.Client().FlushAll(context.Background())
		for i := 0; i < 3; i++ {
			assertBody(t, e.Do(t, "POST", "/api/track", "", []byte("not gzip"), "Content-Encoding", "gzip"), 400, `{"message":"Bad Request."}`)
		}
		assertBody(t, e.Do(t, "POST", "/api/track", "", trackBody(t1, 1)), 429, `{"message":"Too Many Attempts."}`)
		e.Redis.Client().FlushAll(context.Background())
	})
	t.Run("the webhook is never limited", func(t *testing.T) {
		for i := 0; i < 6; i++ {
			if res := e.Do(t, "POST", "/api/webhooks/psp", "", []byte(`{}`)); res.Status != 200 || res.Header.Get("X-RateLimit-Limit") != "" {
				t.Fatalf("webhook %d: %d %v", i+1, res.Status, res.Header)
			}
		}
	})
	t.Run("without Redis, requests are let through", func(t *testing.T) {
		e.Redis.Stop()
		defer e.Redis.Start()
		if res := e.Do(t, "POST", "/api/track", "", trackBody(t1, 1)); res.Status != 202 {
			t.Fatalf("track with the limiter's store down: %d %s", res.Status, res.Body)
		}
		res := e.getMetrics(t)
		if !regexp.MustCompile(`(?m)^eventq_rate_limit_store_errors_total [1-9]`).Match(res.Body) {
			t.Fatal("the store failure is not counted in eventq_rate_limit_store_errors_total")
		}
	})
}

// A compressed webhook body is decoded only when it carries a signature header, and only
// RATE_LIMIT_AUTH_FAILURES' number of times per address: a signed one the provider (or a
// proxy) compressed is verified, one without a signature header or past the budget is refused
// as unsigned, undecoded. Every one is answered 200.
func TestCompressedWebhooksAreDecodedOnlyWhenSignedWithinABudget(t *testing.T) {
	e := startAPI(t, "PSP_WEBHOOK_SECRET=whsec_decode", "RATE_LIMIT_AUTH_FAILURES=2/m")
	payload := []byte(`{"id":"evt_decode","object":"event","type":"customer.created","api_version":"2023-10-16","created":1,"data":{"object":{}}}`)
	var zb bytes.Buffer
	zw := gzip.NewWriter(&zb)
	zw.Write(payload)
	zw.Close()
	outcome := func(name string) float64 {
		t.Helper()
		m := regexp.MustCompile(`(?m)^eventq_webhooks_total\{outcome="` + name + `"\} (\d+)`).FindSubmatch(e.getMetrics(t).Body)
		if m == nil {
			return 0
		}
		n, _ := strconv.ParseFloat(string(m[1]), 64)
		return n
	}
	send := func(signed bool) {
		t.Helper()
		headers := []string{"Content-Encoding", "gzip", "Content-Type", "application/json"}
		if signed {
			headers = append(headers, "PSP-Signature", psp.Sign(payload, "whsec_decode", time.Now()))
		}
		if res := e.Do(t, "POST", "/api/webhooks/psp", "", zb.Bytes(), headers...); res.Status != 200 {
			t.Fatalf("webhook: %d %s", res.Status, res.Body)
		}
	}
	send(false)
	if bad, verified := outcome("bad_signature"), outcome("verified"); bad != 1 || verified != 0 {
		t.Fatalf("an unsigned compressed body: %v refused, %v verified; want it refused undecoded", bad, verified)
	}
	send(true)
	send(true)
	if verified := outcome("verified"); verified != 2 {
		t.Fatalf("%v of two signed compressed bodies verified, want both decoded", verified)
	}
	send(true) // past the address's budget of 2 a minute
	if bad, verified := outcome("bad_signature"), outcome("verified"); bad != 2 || verified != 2 {
		t.Fatalf("a third signed compressed body within a minute: %v refused, %v verified; want it refused undecoded", bad, verified)
	}
}
