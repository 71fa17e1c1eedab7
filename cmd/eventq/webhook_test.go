package main

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/hibiken/asynq"
	"github.com/stripe/stripe-go/v76"

	"github.com/eventq/eventq/internal/clock"
	"github.com/eventq/eventq/internal/metrics"
	"github.com/eventq/eventq/internal/payments"
	"github.com/eventq/eventq/internal/psp"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/jobs"
	"github.com/eventq/eventq/models"
	"github.com/eventq/eventq/routes"
)

var webhookSentKeys = []string{"event_id", "type", "checkout_session_id", "url", "status"}

// received is one request seen by a webhookSink.
type received struct {
	Method, Path string
	Header       http.Header
	Body         []byte
}

// webhookSink is a webhook endpoint that records every request and answers status, or, with
// an app, hands the request to that real api and answers what it answers.
type webhookSink struct {
	*httptest.Server
	status int
	app    *fiber.App

	mu   sync.Mutex
	reqs []received
}

func newWebhookSink(t *testing.T, status int) *webhookSink {
	t.Helper()
	s := &webhookSink{status: status}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.reqs = append(s.reqs, received{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body})
		s.mu.Unlock()
		if s.app != nil {
			req := httptest.NewRequest(r.Method, r.URL.RequestURI(), bytes.NewReader(body))
			req.Header = r.Header.Clone()
			res, err := s.app.Test(req, -1)
			if err != nil {
				t.Errorf("api: %v", err)
				w.WriteHeader(http.StatusInternalServerError)
				return
			}
			defer res.Body.Close()
			w.Header().Set("Content-Type", res.Header.Get("Content-Type"))
			w.WriteHeader(res.StatusCode)
			io.Copy(w, res.Body)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(s.status)
		io.WriteString(w, `{"message":"answered"}`)
	}))
	t.Cleanup(s.Close)
	return s
}

// newAPISink is a webhookSink in front of the real webhook handler of an api whose
// PSP_WEBHOOK_SECRET is secrets, on a fresh Redis and e's database. It points the CLI's
// REDIS_URL at that Redis and returns the sink and an inspector of the api's tasks.
func (e *cliEnv) newAPISink(t *testing.T, secrets ...string) (*webhookSink, *asynq.Inspector) {
	t.Helper()
	r := testenv.StartRedis(t)
	e.environ = append(e.environ, "REDIS_URL="+r.URL())
	s := newWebhookSink(t, 0)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	s.app = routes.New(&routes.Server{
		Log: log, Metrics: metrics.New(),
		Payments: &payments.Service{
			DB: e.db, Log: log, Webhooks: psp.NewVerifier(secrets, clock.Real{}),
			Queue: jobs.NewProviderEvents(asynq.NewClientFromRedisClient(r.Client())),
		},
	})
	return s, asynq.NewInspectorFromRedisClient(r.Client())
}

// mustQueued checks the api accepted event id as its event type: queued as the task of that
// type, or, when its enqueue was slow (a busy machine), saved in the webhook inbox, from which
// the worker enqueues it.
func (e *cliEnv) mustQueued(t *testing.T, inspector *asynq.Inspector, id, eventType string) {
	t.Helper()
	info, err := inspector.GetTaskInfo(jobs.TaskQueue, id)
	if err != nil {
		var saved models.WebhookInbox
		if e.db.Where("event_id = ?", id).Take(&saved).Error != nil {
			t.Fatalf("task %s: %v, and not in the webhook inbox", id, err)
		}
		if saved.Type != eventType {
			t.Errorf("inbox entry of type %s, want %s", saved.Type, eventType)
		}
		return
	}
	if info.Type != "psp:"+eventType {
		t.Errorf("task type %s, want psp:%s", info.Type, eventType)
	}
}

// requests returns what the sink has received so far.
func (s *webhookSink) requests() []received {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]received(nil), s.reqs...)
}

// mustOne returns the only request the sink received.
func (s *webhookSink) mustOne(t *testing.T) received {
	t.Helper()
	reqs := s.requests()
	if len(reqs) != 1 {
		t.Fatalf("endpoint received %d requests, want 1", len(reqs))
	}
	return reqs[0]
}

// shop is a tenant with a member and a product, created through the CLI.
type shop struct{ tenant, member, product string }

func (e *cliEnv) mustShop(t *testing.T, account string) shop {
	t.Helper()
	args := []string{"tenant", "create", "--name", "Acme"}
	if account != "" {
		args = append(args, "--psp-account", account)
	}
	tenant := str(t, e.MustObject(t, tenantKeys, args...), "id")
	return shop{tenant, e.mustMember(t, tenant, "ada@example.com"), e.mustProduct(t, tenant, 1999, "eur")}
}

func (s shop) args(extra ...string) []string {
	return append([]string{"webhook", "send", "--tenant", s.tenant, "--member", s.member, "--product", s.product}, extra...)
}

// mustVerify checks the request the way the webhook endpoint does, with secret, and returns
// the event and its checkout session.
func mustVerify(t *testing.T, r received, secret string) (stripe.Event, psp.SessionObject) {
	t.Helper()
	ev, err := psp.NewVerifier([]string{secret}, clock.Real{}).Verify(r.Body, r.Header.Get("PSP-Signature"))
	if err != nil {
		t.Fatalf("verify with %s: %v (PSP-Signature %q)", secret, err, r.Header.Get("PSP-Signature"))
	}
	var session psp.SessionObject
	if err := json.Unmarshal(ev.Data.Raw, &session); err != nil {
		t.Fatalf("decode data.object %s: %v", ev.Data.Raw, err)
	}
	return ev, session
}

func TestWebhookSend(t *testing.T) {
	t.Run("posts a signed, realistic checkout.session.completed for the connected account", func(t *testing.T) {
		e := newCLI(t)
		e.environ = append(e.environ, "PSP_WEBHOOK_SECRET=whsec_test", "APP_URL=https://pay.example/")
		sink, tasks := e.newAPISink(t, "whsec_test")
		s := e.mustShop(t, "acct_1ABC")
		url := sink.URL + "/api/webhooks/psp"

		out := e.MustObject(t, webhookSentKeys, s.args("--url", url)...)
		r := sink.mustOne(t)
		e.mustQueued(t, tasks, str(t, out, "event_id"), "checkout.session.completed")
		if r.Method != http.MethodPost || r.Path != "/api/webhooks/psp" {
			t.Errorf("request %s %s, want POST /api/webhooks/psp", r.Method, r.Path)
		}
		if ct := r.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("Content-Type %q, want application/json", ct)
		}
		ev, session := mustVerify(t, r, "whsec_test")
		if ev.Type != "checkout.session.completed" || ev.Account != "acct_1ABC" || ev.Livemode {
			t.Errorf("event type %q, account %q, livemode %v; want %s, acct_1ABC, false", ev.Type, ev.Account, ev.Livemode, "checkout.session.completed")
		}
		if !strings.HasPrefix(ev.ID, "evt_") {
			t.Errorf("event id %q, want evt_…", ev.ID)
		}
		wantMeta := map[string]string{"tenant_id": s.tenant, "audience_member_id": s.member, "product_id": s.product}
		for k, v := range wantMeta {
			if session.Metadata[k] != v {
				t.Errorf("metadata[%s] = %q, want %q", k, session.Metadata[k], v)
			}
		}
		if len(session.Metadata) != len(wantMeta) {
			t.Errorf("metadata %v, want exactly %v", session.Metadata, wantMeta)
		}
		wantURL := "https://pay.example/checkout/return?tenant=" + s.tenant + "&session_id={CHECKOUT_SESSION_ID}"
		switch {
		case !strings.HasPrefix(session.ID, "cs_test_"), session.Object != "checkout.session":
			t.Errorf("session id %q object %q, want cs_test_… checkout.session", session.ID, session.Object)
		case session.AmountTotal != 1999 || session.Currency != "eur":
			t.Errorf("amount %d %s, want 1999 eur", session.AmountTotal, session.Currency)
		case session.PaymentStatus != "paid" || session.Status != "complete" || session.Mode != "payment":
			t.Errorf("payment_status %q status %q mode %q, want paid complete payment", session.PaymentStatus, session.Status, session.Mode)
		case session.CustomerEmail != "ada@example.com":
			t.Errorf("customer_email %q, want ada@example.com", session.CustomerEmail)
		case session.PaymentIntent == nil || !strings.HasPrefix(*session.PaymentIntent, "pi_"):
			t.Errorf("payment_intent %v, want pi_…", session.PaymentIntent)
		case session.SuccessURL != wantURL:
			t.Errorf("success_url %q, want %q", session.SuccessURL, wantURL)
		}

		want := map[string]any{"event_id": ev.ID, "type": "checkout.session.completed",
			"checkout_session_id": session.ID, "url": url, "status": float64(200)}
		for k, v := range want {
			if out[k] != v {
				t.Errorf("printed %s = %#v, want %#v", k, out[k], v)
			}
		}
		if n := e.count(t, &models.Purchase{}); n != 0 {
			t.Errorf("%d purchases, want 0: the CLI only sends", n)
		}
	})

	t.Run("posts to APP_URL/api/webhooks/psp by default", func(t *testing.T) {
		e := newCLI(t)
		sink, _ := e.newAPISink(t, "whsec_test")
		e.environ = append(e.environ, "PSP_WEBHOOK_SECRET=whsec_test", "APP_URL="+sink.URL)
		s := e.mustShop(t, "acct_1ABC")
		out := e.MustObject(t, webhookSentKeys, s.args()...)
		if r := sink.mustOne(t); r.Path != "/api/webhooks/psp" {
			t.Errorf("posted to %s, want /api/webhooks/psp", r.Path)
		}
		if got := str(t, out, "url"); got != sink.URL+"/api/webhooks/psp" {
			t.Errorf("printed url %q", got)
		}
	})

	t.Run("honours --type", func(t *testing.T) {
		e := newCLI(t)
		e.environ = append(e.environ, "PSP_WEBHOOK_SECRET=whsec_test")
		sink, tasks := e.newAPISink(t, "whsec_test")
		s := e.mustShop(t, "acct_1ABC")
		typ := "checkout.session.async_payment_succeeded"
		out := e.MustObject(t, webhookSentKeys, s.args("--url", sink.URL+"/api/webhooks/psp", "--type", typ)...)
		ev, _ := mustVerify(t, sink.mustOne(t), "whsec_test")
		if string(ev.Type) != typ || str(t, out, "type") != typ || str(t, out, "event_id") != ev.ID {
			t.Errorf("--type %s: event type %q, printed %v", typ, ev.Type, out)
		}
		e.mustQueued(t, tasks, ev.ID, typ)
	})

	t.Run("fails for a type the service does not handle, naming the ones it does, sending nothing", func(t *testing.T) {
		e := newCLI(t)
		e.environ = append(e.environ, "PSP_WEBHOOK_SECRET=whsec_test")
		sink, _ := e.newAPISink(t, "whsec_test")
		s := e.mustShop(t, "acct_1ABC")
		stderr := e.MustFail(t, s.args("--url", sink.URL, "--type", "checkout.session.expired")...)
		want := "eventq: --type checkout.session.expired: the service does not handle this type, so it would ignore the event; use one of " +
			strings.Join(payments.HandledTypes(), ", ") + "\n"
		if stderr != want {
			t.Errorf("stderr %q, want %q", stderr, want)
		}
		for _, typ := range []string{"checkout.session.completed", "checkout.session.async_payment_succeeded", "charge.refunded", "charge.dispute.created"} {
			if !strings.Contains(stderr, typ) {
				t.Errorf("stderr %q does not name %s", stderr, typ)
			}
		}
		if n := len(sink.requests()); n != 0 {
			t.Errorf("endpoint received %d requests, want 0", n)
		}
	})

	t.Run("fails naming PSP_WEBHOOK_SECRET when the api's secret differs", func(t *testing.T) {
		e := newCLI(t)
		e.environ = append(e.environ, "PSP_WEBHOOK_SECRET=whsec_typo")
		sink, tasks := e.newAPISink(t, "whsec_api")
		s := e.mustShop(t, "acct_1ABC")
		stderr := e.MustFail(t, s.args("--url", sink.URL+"/api/webhooks/psp")...)
		r := sink.mustOne(t) // it was sent, answered 200 and refused
		ev, _ := mustVerify(t, r, "whsec_typo")
		if !strings.Contains(stderr, "PSP_WEBHOOK_SECRET") || !strings.Contains(stderr, ev.ID) || !strings.Contains(stderr, "answered 200") {
			t.Errorf("stderr %q does not name PSP_WEBHOOK_SECRET, the event and the 200", stderr)
		}
		if _, err := tasks.GetTaskInfo(jobs.TaskQueue, ev.ID); err == nil {
			t.Errorf("the api queued an event signed with another secret")
		}
	})

	t.Run("omits the account for a tenant without one", func(t *testing.T) {
		e := newCLI(t)
		e.environ = append(e.environ, "PSP_WEBHOOK_SECRET=whsec_test")
		sink, _ := e.newAPISink(t, "whsec_test")
		s := e.mustShop(t, "")
		e.MustObject(t, webhookSentKeys, s.args("--url", sink.URL+"/api/webhooks/psp")...)
		r := sink.mustOne(t)
		ev, _ := mustVerify(t, r, "whsec_test")
		var raw map[string]json.RawMessage
		if err := json.Unmarshal(r.Body, &raw); err != nil {
			t.Fatal(err)
		}
		if _, ok := raw["account"]; ok || ev.Account != "" {
			t.Errorf("event carries account %s, want none", raw["account"])
		}
	})

	t.Run("signs with the first secret of a rotation list and accepts the STRIPE_ alias", func(t *testing.T) {
		for _, env := range []string{"PSP_WEBHOOK_SECRET=whsec_new, whsec_old", "STRIPE_WEBHOOK_SECRET=whsec_new"} {
			e := newCLI(t)
			e.environ = append(e.environ, env)
			sink, _ := e.newAPISink(t, "whsec_new")
			s := e.mustShop(t, "acct_1ABC")
			e.MustObject(t, webhookSentKeys, s.args("--url", sink.URL+"/api/webhooks/psp")...)
			r := sink.mustOne(t)
			mustVerify(t, r, "whsec_new")
			if _, err := psp.NewVerifier([]string{"whsec_old"}, clock.Real{}).Verify(r.Body, r.Header.Get("PSP-Signature")); err == nil {
				t.Errorf("%s: the event also verifies with whsec_old", env)
			}
		}
	})

	t.Run("fails naming PSP_WEBHOOK_SECRET when none is configured", func(t *testing.T) {
		e := newCLI(t)
		sink := newWebhookSink(t, http.StatusOK)
		s := e.mustShop(t, "acct_1ABC")
		if stderr := e.MustFail(t, s.args("--url", sink.URL)...); !strings.Contains(stderr, "PSP_WEBHOOK_SECRET") {
			t.Errorf("stderr %q does not name PSP_WEBHOOK_SECRET", stderr)
		}
		if n := len(sink.requests()); n != 0 {
			t.Errorf("endpoint received %d requests, want 0", n)
		}
	})

	t.Run("fails when the endpoint does not answer 2xx", func(t *testing.T) {
		for _, status := range []int{http.StatusInternalServerError, http.StatusBadRequest} {
			e := newCLI(t)
			e.environ = append(e.environ, "PSP_WEBHOOK_SECRET=whsec_test")
			sink := newWebhookSink(t, status)
			s := e.mustShop(t, "acct_1ABC")
			stderr := e.MustFail(t, s.args("--url", sink.URL)...)
			if !strings.Contains(stderr, http.StatusText(status)) || !strings.Contains(stderr, "evt_") {
				t.Errorf("status %d: stderr %q does not give the status and the event id", status, stderr)
			}
			sink.mustOne(t)
		}
	})

	t.Run("fails when the endpoint is unreachable", func(t *testing.T) {
		e := newCLI(t)
		e.environ = append(e.environ, "PSP_WEBHOOK_SECRET=whsec_test")
		sink := newWebhookSink(t, http.StatusOK)
		sink.Close()
		s := e.mustShop(t, "acct_1ABC")
		if stderr := e.MustFail(t, s.args("--url", sink.URL)...); !strings.Contains(stderr, sink.URL) || !strings.Contains(stderr, "not running") {
			t.Errorf("stderr %q does not name the URL and say the api is not running", stderr)
		}
	})

	t.Run("fails for a member or product of another tenant", func(t *testing.T) {
		e := newCLI(t)
		e.environ = append(e.environ, "PSP_WEBHOOK_SECRET=whsec_test")
		sink := newWebhookSink(t, http.StatusOK)
		a, b := e.mustShop(t, "acct_A"), e.mustShop(t, "acct_B")
		for _, tc := range []struct {
			name    string
			s       shop
			wantMsg string
		}{
			{"member", shop{a.tenant, b.member, a.product}, "member " + b.member + " not found at tenant " + a.tenant},
			{"product", shop{a.tenant, a.member, b.product}, "product " + b.product + " not found at tenant " + a.tenant},
		} {
			if stderr := e.MustFail(t, tc.s.args("--url", sink.URL)...); !strings.Contains(stderr, tc.wantMsg) {
				t.Errorf("foreign %s: stderr %q, want %q", tc.name, stderr, tc.wantMsg)
			}
		}
		if n := len(sink.requests()); n != 0 {
			t.Errorf("endpoint received %d requests, want 0", n)
		}
	})

	t.Run("fails on bad or missing flags", func(t *testing.T) {
		e := newCLI(t)
		e.environ = append(e.environ, "PSP_WEBHOOK_SECRET=whsec_test")
		sink := newWebhookSink(t, http.StatusOK)
		s := e.mustShop(t, "acct_1ABC")
		for _, tc := range []struct {
			name    string
			args    []string
			wantMsg string
		}{
			{"unknown tenant", shop{"999999", s.member, s.product}.args("--url", sink.URL), "tenant 999999 not found"},
			{"no tenant", []string{"webhook", "send", "--member", s.member, "--product", s.product, "--url", sink.URL}, "--tenant"},
			{"no member", []string{"webhook", "send", "--tenant", s.tenant, "--product", s.product, "--url", sink.URL}, "--member"},
			{"bad member", shop{s.tenant, "ada", s.product}.args("--url", sink.URL), "--member"},
			{"no product", []string{"webhook", "send", "--tenant", s.tenant, "--member", s.member, "--url", sink.URL}, "--product"},
			{"unknown product", shop{s.tenant, s.member, "999999"}.args("--url", sink.URL), "product 999999 not found"},
			{"relative url", s.args("--url", "/api/webhooks/psp"), "--url"},
			{"ftp url", s.args("--url", "ftp://example.com/x"), "--url"},
			{"empty type", s.args("--url", sink.URL, "--type", ""), "--type"},
		} {
			if stderr := e.MustFail(t, tc.args...); !strings.Contains(stderr, tc.wantMsg) {
				t.Errorf("%s: stderr %q does not mention %q", tc.name, stderr, tc.wantMsg)
			}
		}
		if n := len(sink.requests()); n != 0 {
			t.Errorf("endpoint received %d requests, want 0", n)
		}
	})
}

// Without APP_URL the CLI reaches the api at HTTP_ADDR, as make run starts it.
func TestAPIURLFollowsHTTPAddrWithoutAppURL(t *testing.T) {
	for _, tc := range []struct {
		environ []string
		want    string
	}{
		{nil, "http://127.0.0.1:8080"},
		{[]string{"HTTP_ADDR=127.0.0.1:9100"}, "http://127.0.0.1:9100"},
		{[]string{"HTTP_ADDR=:9100"}, "http://127.0.0.1:9100"},
		{[]string{"HTTP_ADDR=0.0.0.0:9100"}, "http://127.0.0.1:9100"},
		{[]string{"HTTP_ADDR=127.0.0.1:9100", "APP_URL=https://events.example.com/"}, "https://events.example.com"},
	} {
		c := &cli{environ: tc.environ}
		cfg, err := c.config()
		if err != nil {
			t.Fatal(err)
		}
		if got := c.apiURL(cfg); got != tc.want {
			t.Errorf("%v: %s, want %s", tc.environ, got, tc.want)
		}
	}
}

// mustPurchase stores a paid purchase of s, as fulfilment does, and returns its id and row.
func (e *cliEnv) mustPurchase(t *testing.T, s shop) (string, models.Purchase) {
	t.Helper()
	p, _ := e.insertPurchase(t, s.tenant, s.member, s.product, psp.NewID("cs_test"), 1999, time.Now())
	return models.FormatID(p.ID), p
}

func TestWebhookSendRefundsAndDisputes(t *testing.T) {
	t.Run("posts a full refund and a dispute of a purchase's payment", func(t *testing.T) {
		e := newCLI(t)
		e.environ = append(e.environ, "PSP_WEBHOOK_SECRET=whsec_test")
		sink, tasks := e.newAPISink(t, "whsec_test")
		s := e.mustShop(t, "acct_1ABC")
		id, p := e.mustPurchase(t, s)
		url := sink.URL + "/api/webhooks/psp"
		for i, typ := range []string{"charge.refunded", "charge.dispute.created"} {
			args := []string{"webhook", "send", "--tenant", s.tenant, "--purchase", id, "--type", typ, "--url", url}
			out := e.MustObject(t, webhookSentKeys, args...)
			r := sink.requests()[i]
			ev, err := psp.NewVerifier([]string{"whsec_test"}, clock.Real{}).Verify(r.Body, r.Header.Get("PSP-Signature"))
			if err != nil {
				t.Fatalf("%s: verify: %v", typ, err)
			}
			e.mustQueued(t, tasks, ev.ID, typ)
			if string(ev.Type) != typ || ev.Account != "acct_1ABC" {
				t.Errorf("event type %q on %q, want %s on acct_1ABC", ev.Type, ev.Account, typ)
			}
			want := map[string]any{"event_id": ev.ID, "type": typ, "checkout_session_id": p.PSPCheckoutSessionID, "url": url, "status": float64(200)}
			for k, v := range want {
				if out[k] != v {
					t.Errorf("%s: printed %s = %#v, want %#v", typ, k, out[k], v)
				}
			}
			var object map[string]any
			testenv.Must(t, json.Unmarshal(ev.Data.Raw, &object))
			wantObject := map[string]any{"payment_intent": p.PSPPaymentIntentID, "amount": float64(1999), "currency": "usd"}
			if typ == "charge.refunded" {
				wantObject["object"], wantObject["amount_refunded"], wantObject["refunded"] = "charge", float64(1999), true
			} else {
				wantObject["object"] = "dispute"
			}
			for k, v := range wantObject {
				if object[k] != v {
					t.Errorf("%s: data.object.%s = %#v, want %#v", typ, k, object[k], v)
				}
			}
		}
		if n := e.count(t, &models.PurchaseReversal{}); n != 0 {
			t.Errorf("%d reversals, want 0: the CLI only sends", n)
		}
	})

	t.Run("sends every type the service handles", func(t *testing.T) {
		e := newCLI(t)
		e.environ = append(e.environ, "PSP_WEBHOOK_SECRET=whsec_test")
		sink, tasks := e.newAPISink(t, "whsec_test")
		s := e.mustShop(t, "")
		id, _ := e.mustPurchase(t, s)
		for _, typ := range payments.HandledTypes() {
			args := []string{"webhook", "send", "--tenant", s.tenant, "--type", typ, "--url", sink.URL + "/api/webhooks/psp"}
			if object, _ := payments.EventObject(typ); object == payments.ObjectCheckoutSession {
				args = append(args, "--member", s.member, "--product", s.product)
			} else {
				args = append(args, "--purchase", id)
			}
			e.mustQueued(t, tasks, str(t, e.MustObject(t, webhookSentKeys, args...), "event_id"), typ)
		}
	})

	t.Run("fails on flags that do not fit the type, or a purchase it cannot name, sending nothing", func(t *testing.T) {
		e := newCLI(t)
		e.environ = append(e.environ, "PSP_WEBHOOK_SECRET=whsec_test")
		sink, _ := e.newAPISink(t, "whsec_test")
		s, other := e.mustShop(t, "acct_1ABC"), e.mustShop(t, "acct_2DEF")
		id, _ := e.mustPurchase(t, s)
		otherID, _ := e.mustPurchase(t, other)
		noPI, p := e.mustPurchase(t, s)
		testenv.Must(t, e.db.Model(&p).Update("psp_payment_intent_id", "").Error)
		refund := func(extra ...string) []string {
			return append([]string{"webhook", "send", "--tenant", s.tenant, "--type", "charge.refunded", "--url", sink.URL}, extra...)
		}
		for _, tc := range []struct {
			name string
			args []string
			want string
		}{
			{"no purchase", refund(), `--purchase must be a purchase id, got ""`},
			{"bad purchase", refund("--purchase", "abc"), `--purchase must be a purchase id, got "abc"`},
			{"unknown purchase", refund("--purchase", "999999"), "purchase 999999 not found at tenant " + s.tenant},
			{"purchase of another tenant", refund("--purchase", otherID), "purchase " + otherID + " not found at tenant " + s.tenant},
			{"purchase without payment intent", refund("--purchase", noPI), "purchase " + noPI + " has no payment intent, so no refund or dispute can name it"},
			{"member for a refund", refund("--purchase", id, "--member", s.member),
				"--member and --product are for checkout events; a charge.refunded event is about the purchase given with --purchase"},
			{"product for a dispute", []string{"webhook", "send", "--tenant", s.tenant, "--type", "charge.dispute.created", "--purchase", id, "--product", s.product, "--url", sink.URL},
				"--member and --product are for checkout events; a charge.dispute.created event is about the purchase given with --purchase"},
			{"purchase for a checkout", s.args("--purchase", id, "--url", sink.URL),
				"--purchase is for refund and dispute events; a checkout.session.completed event makes a new purchase for --member and --product"},
		} {
			if stderr := e.MustFail(t, tc.args...); stderr != "eventq: "+tc.want+"\n" {
				t.Errorf("%s: stderr %q, want %q", tc.name, stderr, "eventq: "+tc.want+"\n")
			}
		}
		if n := len(sink.requests()); n != 0 {
			t.Errorf("endpoint received %d requests, want 0", n)
		}
	})
}
