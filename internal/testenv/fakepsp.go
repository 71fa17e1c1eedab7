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

	"github.com/eventq/eventq/internal/psp"
)

// FakePSP is an httptest server speaking the two provider calls eventq makes: create and
// retrieve a Checkout Session, scoped by the Stripe-Account header like the real API. Point
// PSP_API_BASE at URL.
type FakePSP struct {
	URL string

	mu       sync.Mutex
	sessions map[string]*fakeSession
	seq      int
	down     bool
	requests []FakeRequest
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
	s       psp.CheckoutSession
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
func (f *FakePSP) AddSession(account string, s psp.CheckoutSession) psp.CheckoutSession {
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
func (f *FakePSP) Pay(id string) psp.CheckoutSession {
	f.mu.Lock()
	defer f.mu.Unlock()
	fs := f.sessions[id]
	fs.s.PaymentStatus, fs.s.Status = "paid", "complete"
	pi := "pi_" + strings.TrimPrefix(id, "cs_")
	fs.s.PaymentIntent = &pi
	return fs.s
}

// Session returns the stored session and its account.
func (f *FakePSP) Session(id string) (psp.CheckoutSession, string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fs, ok := f.sessions[id]
	if !ok {
		return psp.CheckoutSession{}, "", false
	}
	return fs.s, fs.account, true
}

func (f *FakePSP) serve(w http.ResponseWriter, r *http.Request) {
	r.ParseForm()
	f.mu.Lock()
	defer f.mu.Unlock()
	account := r.Header.Get("Stripe-Account")
	f.requests = append(f.requests, FakeRequest{Method: r.Method, Path: r.URL.Path, Account: account, Form: r.PostForm})
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
		s := psp.CheckoutSession{
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
	default:
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"error":{"type":"invalid_request_error","message":"Unrecognized request URL"}}`)
	}
}
