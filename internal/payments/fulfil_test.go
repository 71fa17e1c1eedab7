package payments_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/eventq/eventq/internal/metrics"
	"github.com/eventq/eventq/internal/payments"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/models"
)

func TestFulfil(t *testing.T) {
	e := newEnv(t, true)
	e.Svc.Metrics = metrics.New()
	other := e.MustShop(t, "acct_other")
	cases := []struct {
		name string
		// edit turns a paid session of s into the session under test.
		edit   func(s *payments.Session)
		status string // "" for a rejected session
	}{
		{"fulfils a paid session", func(*payments.Session) {}, payments.StatusFulfilled},
		{"fulfils a session that needs no payment", func(s *payments.Session) { s.PaymentStatus = "no_payment_required" }, payments.StatusFulfilled},
		{"leaves an unpaid session pending", func(s *payments.Session) { s.PaymentStatus = "unpaid" }, payments.StatusPending},
		{"rejects a session without metadata", func(s *payments.Session) { s.Metadata = nil }, ""},
		{"rejects a session whose metadata lacks the product", func(s *payments.Session) { delete(s.Metadata, payments.MetaProduct) }, ""},
		{"rejects malformed metadata", func(s *payments.Session) { s.Metadata[payments.MetaMember] = "abc" }, ""},
		{"rejects an unknown tenant", func(s *payments.Session) { s.Metadata[payments.MetaTenant] = "999999" }, ""},
		{"rejects a member of another tenant", func(s *payments.Session) {
			s.Metadata[payments.MetaMember] = models.FormatID(other.Member.ID)
		}, ""},
		{"rejects a product of another tenant", func(s *payments.Session) {
			s.Metadata[payments.MetaProduct] = models.FormatID(other.Product.ID)
		}, ""},
		{"rejects a session on another connected account", func(s *payments.Session) { s.Account = "acct_other" }, ""},
		{"rejects a platform session of a tenant with a connected account", func(s *payments.Session) { s.Account = "" }, ""},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sh := e.MustShop(t, fmt.Sprintf("acct_fulfil_%d", i))
			s := e.Session(sh)
			tc.edit(&s)
			pushed := len(e.Pusher.types())
			outcome := tc.status
			if outcome == "" {
				outcome = "rejected"
			}
			before := testutil.ToFloat64(e.Svc.Metrics.Fulfilments.WithLabelValues(outcome))

			res, err := e.Svc.Fulfil(context.Background(), s)
			if tc.status == "" {
				if !errors.Is(err, payments.ErrRejected) {
					t.Fatalf("Fulfil = %+v, %v; want an error wrapping ErrRejected", res, err)
				}
			} else if err != nil || res.Status != tc.status {
				t.Fatalf("Fulfil = %+v, %v; want status %s", res, err, tc.status)
			}
			if got := testutil.ToFloat64(e.Svc.Metrics.Fulfilments.WithLabelValues(outcome)); got != before+1 {
				t.Errorf("fulfilments{outcome=%q} went from %v to %v, want one more", outcome, before, got)
			}
			if tc.status != payments.StatusFulfilled {
				if n := e.Count(t, &models.Purchase{}, "psp_checkout_session_id = ?", s.ID); n != 0 || res.PurchaseID != 0 {
					t.Errorf("%d purchases, purchase id %d; want none", n, res.PurchaseID)
				}
				if n := e.Count(t, &models.TrackedEvent{}, "tenant_id = ?", sh.Tenant.ID); n != 0 {
					t.Errorf("%d tracked events, want none", n)
				}
				if got := len(e.Pusher.types()); got != pushed {
					t.Errorf("%d events pushed, want none", got-pushed)
				}
				return
			}
			assertFulfilled(t, e, sh, s, res.PurchaseID)
			if got := e.Pusher.types()[pushed:]; !reflect.DeepEqual(got, []string{payments.EventPurchaseCompleted}) {
				t.Errorf("pushed %v, want one purchase_completed", got)
			}
		})
	}
}

// assertFulfilled checks the purchase, entitlement and purchase_completed event of s.
func assertFulfilled(t *testing.T, e *env, sh shop, s payments.Session, purchaseID uint64) {
	t.Helper()
	type view struct {
		ID, Tenant, Member, Product uint64
		Session, PaymentIntent      string
		Amount                      int64
		Currency, Status            string
	}
	var p models.Purchase
	testenv.Must(t, e.DB.Take(&p, "psp_checkout_session_id = ?", s.ID).Error)
	got := view{p.ID, p.TenantID, p.AudienceMemberID, p.ProductID, p.PSPCheckoutSessionID, p.PSPPaymentIntentID, p.AmountTotal, p.Currency, p.Status}
	want := view{purchaseID, sh.Tenant.ID, sh.Member.ID, sh.Product.ID, s.ID, s.PaymentIntent, 1999, "usd", models.PurchasePaid}
	if got != want {
		t.Errorf("purchase %+v, want %+v", got, want)
	}
	if n := e.Count(t, &models.Entitlement{}, "purchase_id = ? AND audience_member_id = ? AND revoked_at IS NULL", p.ID, sh.Member.ID); n != 1 {
		t.Errorf("%d entitlements in force, want 1", n)
	}
	var evs []models.TrackedEvent
	testenv.Must(t, e.DB.Where("tenant_id = ?", sh.Tenant.ID).Find(&evs).Error)
	if len(evs) != 1 {
		t.Fatalf("%d tracked events, want 1", len(evs))
	}
	ev := evs[0]
	if ev.Type != payments.EventPurchaseCompleted || ev.SessionID != s.ID || ev.AudienceMemberID == nil ||
		*ev.AudienceMemberID != models.FormatID(sh.Member.ID) || ev.URL != payments.ReturnURL(appURL, sh.Tenant.ID, s.ID) ||
		ev.PageHostname != "app.example" || ev.PagePath != "/checkout/return" || ev.UserAgent != "eventq" {
		t.Errorf("tracked event %+v", ev)
	}
}

func TestFulfilQueuesOnlyForQueueingTenants(t *testing.T) {
	for _, queued := range []bool{true, false} {
		t.Run(fmt.Sprintf("queued %v", queued), func(t *testing.T) {
			e := newEnv(t, queued)
			sh := e.MustShop(t, "acct_q")
			if _, err := e.Svc.Fulfil(context.Background(), e.Session(sh)); err != nil {
				t.Fatal(err)
			}
			var ev models.TrackedEvent
			testenv.Must(t, e.DB.Take(&ev, "tenant_id = ?", sh.Tenant.ID).Error)
			if ev.Queued != queued || ev.QueuePending != queued {
				t.Errorf("event queued %v, pending %v; want both %v", ev.Queued, ev.QueuePending, queued)
			}
			want := 0
			if queued {
				want = 1
			}
			if n := len(e.Pusher.types()); n != want {
				t.Errorf("%d events pushed, want %d", n, want)
			}
		})
	}
}

func TestFulfilAgainIsAlreadyFulfilled(t *testing.T) {
	e := newEnv(t, true)
	sh := e.MustShop(t, "acct_again")
	s := e.Session(sh)
	first, err := e.Svc.Fulfil(context.Background(), s)
	if err != nil || first.Status != payments.StatusFulfilled {
		t.Fatalf("first Fulfil = %+v, %v", first, err)
	}
	t.Run("the same paid session", func(t *testing.T) {
		res, err := e.Svc.Fulfil(context.Background(), s)
		if err != nil || res != (payments.Result{Status: payments.StatusAlreadyFulfilled, PurchaseID: first.PurchaseID}) {
			t.Fatalf("Fulfil = %+v, %v; want already_fulfilled of purchase %d", res, err, first.PurchaseID)
		}
	})
	t.Run("an older, unpaid view of the session", func(t *testing.T) {
		unpaid := s
		unpaid.PaymentStatus = "unpaid"
		res, err := e.Svc.Fulfil(context.Background(), unpaid)
		if err != nil || res != (payments.Result{Status: payments.StatusAlreadyFulfilled, PurchaseID: first.PurchaseID}) {
			t.Fatalf("Fulfil = %+v, %v; want already_fulfilled of purchase %d", res, err, first.PurchaseID)
		}
	})
	assertFulfilled(t, e, sh, s, first.PurchaseID)
	if got := e.Pusher.types(); len(got) != 1 {
		t.Errorf("pushed %v, want one event", got)
	}
}

func TestConcurrentFulfilsFulfilOnce(t *testing.T) {
	e := newEnv(t, true)
	sh := e.MustShop(t, "acct_race")
	s := e.Session(sh)
	const n = 8
	var (
		wg      sync.WaitGroup
		start   = make(chan struct{})
		results = make([]payments.Result, n)
		errs    = make([]error, n)
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			results[i], errs[i] = e.Svc.Fulfil(context.Background(), s)
		}()
	}
	close(start)
	wg.Wait()
	fulfilled := 0
	var id uint64
	for i, res := range results {
		if errs[i] != nil {
			t.Fatalf("call %d: %v", i, errs[i])
		}
		if res.Status == payments.StatusFulfilled {
			fulfilled++
		} else if res.Status != payments.StatusAlreadyFulfilled {
			t.Fatalf("call %d: status %s", i, res.Status)
		}
		if id == 0 {
			id = res.PurchaseID
		}
		if res.PurchaseID != id {
			t.Fatalf("purchase ids %d and %d", id, res.PurchaseID)
		}
	}
	if fulfilled != 1 {
		t.Errorf("%d calls fulfilled, want 1", fulfilled)
	}
	assertFulfilled(t, e, sh, s, id)
	if got := e.Pusher.types(); len(got) != 1 {
		t.Errorf("pushed %v, want one event", got)
	}
}
