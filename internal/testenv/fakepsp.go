package testenv

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v76"

	"github.com/eventq/eventq/internal/psp"
)

// FakePSP is an httptest server speaking the provider calls eventq makes: create and
// retrieve a Checkout Session, and list events (types[], created[gte], limit, starting_after,
// has_more), each scoped by the Stripe-Account header like the real API. Point PSP_API_BASE
// at URL.
type FakePSP struct {
	URL string

	mu       sync.Mutex
	sessions map[string]*fakeSession
	events   []fakeEvent // in creation order
	seq      int
	down     bool
	requests []FakeRequest
}

type fakeEvent struct {
	id, account, typ string
	created          int64
	payload          []byte
}

// Calls returns the requests received so far.
func (f *FakePSP) Calls() []FakeRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]FakeRequest(nil), f.requests...)
}

// FakeRequest records one call the fake received.
type FakeRequest struct {
	Method, Path, Account string
	Form                  url.Values
}

type fakeSession struct {
	account string
	s       psp.SessionObject
}

// StartFakePSP starts the fake for t.
func StartFakePSP(t testing.TB) *FakePSP {
	f := &FakePSP{sessions: map[string]*fakeSession{}}
	srv := httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(srv.Close)
	f.URL = srv.URL
	return f
}

// SetDown makes every call answer 500 (true) or work again (false).
func (f *FakePSP) SetDown(down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down = down
}

// AddSession stores a session on account directly (as if created earlier) and returns it.
func (f *FakePSP) AddSession(account string, s psp.SessionObject) psp.SessionObject {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s.ID == "" {
		f.seq++
		s.ID = fmt.Sprintf("cs_test_%d_%d", time.Now().UnixNano(), f.seq)
	}
	s.Object = "checkout.session"
	f.sessions[s.ID] = &fakeSession{account: account, s: s}
	return s
}

// Pay marks a session paid and complete, as after a successful card payment.
func (f *FakePSP) Pay(id string) psp.SessionObject {
	f.mu.Lock()
	defer f.mu.Unlock()
	fs := f.sessions[id]
	fs.s.PaymentStatus, fs.s.Status = "paid", "complete"
	pi := "pi_" + strings.TrimPrefix(id, "cs_")
	fs.s.PaymentIntent = &pi
	return fs.s
}

// Session returns the stored session and its account.
func (f *FakePSP) Session(id string) (psp.SessionObject, string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fs, ok := f.sessions[id]
	if !ok {
		return psp.SessionObject{}, "", false
	}
	return fs.s, fs.account, true
}

func (f *FakePSP) serve(w http.ResponseWriter, r *http.Request) {
	r.ParseForm()
	f.mu.Lock()
	defer f.mu.Unlock()
	account := r.Header.Get("Stripe-Account")
	form := r.PostForm
	if r.Method == http.MethodGet {
		form = r.URL.Query()
	}
	f.requests = append(f.requests, FakeRequest{Method: r.Method, Path: r.URL.Path, Account: account, Form: form})
	w.Header().Set("Content-Type", "application/json")
	if f.down {
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprint(w, `{"error":{"type":"api_error","message":"fake outage"}}`)
		return
	}
	switch {
	case r.Method == "POST" && r.URL.Path == "/v1/checkout/sessions":
		f.seq++
		id := fmt.Sprintf("cs_test_%d_%d", time.Now().UnixNano(), f.seq)
		amount, _ := strconv.ParseInt(r.PostForm.Get("line_items[0][price_data][unit_amount]"), 10, 64)
		pay := "https://checkout.fake/pay/" + id
		s := psp.SessionObject{
			ID: id, Object: "checkout.session", AmountTotal: amount,
			Currency: r.PostForm.Get("line_items[0][price_data][currency]"), Mode: r.PostForm.Get("mode"),
			CustomerEmail: r.PostForm.Get("customer_email"), PaymentStatus: "unpaid", Status: "open",
			SuccessURL: r.PostForm.Get("success_url"), CancelURL: r.PostForm.Get("cancel_url"),
			URL: &pay, Created: time.Now().Unix(), Metadata: map[string]string{},
		}
		for k, v := range r.PostForm {
			if key, ok := strings.CutPrefix(k, "metadata["); ok {
				s.Metadata[strings.TrimSuffix(key, "]")] = v[0]
			}
		}
		f.sessions[id] = &fakeSession{account: account, s: s}
		json.NewEncoder(w).Encode(s)
	case r.Method == "GET" && strings.HasPrefix(r.URL.Path, "/v1/checkout/sessions/"):
		id := strings.TrimPrefix(r.URL.Path, "/v1/checkout/sessions/")
		fs, ok := f.sessions[id]
		if !ok || fs.account != account {
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprintf(w, `{"error":{"code":"resource_missing","message":"No such checkout.session: '%s'","param":"session","type":"invalid_request_error"}}`, id)
			return
		}
		json.NewEncoder(w).Encode(fs.s)
	case r.Method == "GET" && r.URL.Path == "/v1/events":
		f.listEvents(w, account, form)
	default:
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"error":{"type":"invalid_request_error","message":"Unrecognized request URL"}}`)
	}
}

// AddEvent stores an event of eventType about object on account ("" for the platform),
// created at, as the provider would list it. It returns the event's id and JSON, which a test
// may also deliver to the webhook (the same event, as the provider would send it).
func (f *FakePSP) AddEvent(account string, eventType stripe.EventType, object any, at time.Time) (string, []byte) {
	id, payload := psp.NewObjectEvent(eventType, account, object, at)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, fakeEvent{id: id, account: account, typ: string(eventType), created: at.Unix(), payload: payload})
	return id, payload
}

// Complete pays session id and records its checkout.session.completed event now.
func (f *FakePSP) Complete(id string) (string, []byte) {
	s := f.Pay(id)
	_, account, _ := f.Session(id)
	return f.AddEvent(account, stripe.EventTypeCheckoutSessionCompleted, s, time.Now())
}

// Refund records a charge.refunded event for payment intent pi on account: amountRefunded of
// amount, fully refunded when they are equal.
func (f *FakePSP) Refund(account, pi string, amount, amountRefunded int64) (string, []byte) {
	ch := psp.ChargeObject{
		ID: psp.NewID("ch"), Object: "charge", Amount: amount, AmountRefunded: amountRefunded, Currency: "usd",
		PaymentIntent: pi, Refunded: amountRefunded >= amount, Created: time.Now().Unix(),
	}
	return f.AddEvent(account, stripe.EventTypeChargeRefunded, ch, time.Now())
}

// Dispute records a charge.dispute.created event for payment intent pi on account.
func (f *FakePSP) Dispute(account, pi string, amount int64) (string, []byte) {
	d := psp.DisputeObject{
		ID: psp.NewID("dp"), Object: "dispute", Amount: amount, Charge: psp.NewID("ch"), Currency: "usd",
		PaymentIntent: pi, Reason: "fraudulent", Status: "needs_response", Created: time.Now().Unix(),
	}
	return f.AddEvent(account, stripe.EventTypeChargeDisputeCreated, d, time.Now())
}

// listEvents answers GET /v1/events: account's events, newest first, filtered by types[] (or
// type) and created[gte], paginated by limit (default 10, at most 100) and starting_after.
func (f *FakePSP) listEvents(w http.ResponseWriter, account string, form url.Values) {
	types := map[string]bool{}
	for k, v := range form {
		if k == "type" || k == "types" || strings.HasPrefix(k, "types[") {
			for _, t := range v {
				types[t] = true
			}
		}
	}
	gte, _ := strconv.ParseInt(form.Get("created[gte]"), 10, 64)
	limit, err := strconv.Atoi(form.Get("limit"))
	if err != nil || limit < 1 {
		limit = 10
	}
	limit = min(limit, 100)
	var matched []fakeEvent
	for i := len(f.events) - 1; i >= 0; i-- {
		ev := f.events[i]
		if ev.account == account && ev.created >= gte && (len(types) == 0 || types[ev.typ]) {
			matched = append(matched, ev)
		}
	}
	if after := form.Get("starting_after"); after != "" {
		for i, ev := range matched {
			if ev.id == after {
				matched = matched[i+1:]
				break
			}
		}
	}
	hasMore := len(matched) > limit
	if hasMore {
		matched = matched[:limit]
	}
	data := make([]json.RawMessage, len(matched))
	for i, ev := range matched {
		data[i] = ev.payload
	}
	json.NewEncoder(w).Encode(map[string]any{"object": "list", "url": "/v1/events", "has_more": hasMore, "data": data})
}
