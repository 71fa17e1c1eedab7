package main

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eventq/eventq/internal/psp"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/models"
)

func TestReturnPageFulfilsOnce(t *testing.T) {
	for _, flag := range []bool{true, false} {
		t.Run(fmt.Sprintf("queue flag %v", flag), func(t *testing.T) {
			e, fake := startCheckoutAPI(t)
			s := mustShop(t, e, flag)
			cs := e.MustCheckout(t, s)

			t.Run("unpaid session is pending", func(t *testing.T) {
				assertBody(t, e.ReturnJSON(t, s.ID, cs), 200, returnBody("pending", 0))
				if n := e.rows(t, &models.Purchase{}, s.ID); n != 0 {
					t.Fatalf("%d purchases, want 0", n)
				}
			})

			fake.Pay(cs)
			var purchase models.Purchase
			t.Run("paid session is fulfilled", func(t *testing.T) {
				// The provider is asked about a session at most once a second: the visit
				// before the payment's answer ("pending") stands until then.
				res := e.ReturnJSON(t, s.ID, cs)
				for deadline := time.Now().Add(3 * time.Second); res.Status == 200 && string(res.Body) == returnBody("pending", 0) && time.Now().Before(deadline); {
					time.Sleep(50 * time.Millisecond)
					res = e.ReturnJSON(t, s.ID, cs)
				}
				if res.Status != 200 {
					t.Fatalf("got %d %s", res.Status, res.Body)
				}
				purchase = e.assertFulfilledOnce(t, s, cs)
				assertBody(t, res, 200, returnBody("fulfilled", purchase.ID))
				if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
					t.Fatalf("content type %q", ct)
				}
			})
			if purchase.ID == 0 {
				t.FailNow()
			}
			t.Run("event reaches the queue only when flagged", func(t *testing.T) {
				if !flag {
					if n := e.QueueLen(t, s.Tenant); n != 0 {
						t.Fatalf("queue holds %d events, want 0", n)
					}
					return
				}
				got := e.MustRead(t, s.Tenant)
				if got.Data.Count != 1 {
					t.Fatalf("queue %+v, want one event", got.Data)
				}
				ev := got.Data.Events[0]
				if ev.Type != "purchase_completed" || ev.AudienceMemberID == nil || *ev.AudienceMemberID != models.FormatID(s.Member.ID) {
					t.Fatalf("queued event %+v", ev)
				}
				var row models.TrackedEvent
				if err := e.DB.Where("tenant_id = ?", s.ID).Take(&row).Error; err != nil || row.ID != ev.ID {
					t.Fatalf("queued id %s, stored %s (%v)", ev.ID, row.ID, err)
				}
			})
			t.Run("second visit is already fulfilled", func(t *testing.T) {
				assertBody(t, e.ReturnJSON(t, s.ID, cs), 200, returnBody("already_fulfilled", purchase.ID))
				e.assertFulfilledOnce(t, s, cs)
				if flag {
					if n := e.QueueLen(t, s.Tenant); n != 1 {
						t.Fatalf("queue holds %d events, want 1", n)
					}
				}
			})
			t.Run("browser gets an HTML thank-you page", func(t *testing.T) {
				res := e.Do(t, "GET", returnPath(s.ID, cs), "", nil, "Accept", "text/html,application/xhtml+xml,*/*;q=0.8")
				if res.Status != 200 || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/html") ||
					!strings.Contains(string(res.Body), "Thank you") {
					t.Fatalf("got %d %q %s", res.Status, res.Header.Get("Content-Type"), res.Body)
				}
				e.assertFulfilledOnce(t, s, cs)
			})
		})
	}
}

func TestReturnPageRefusesForeignSessions(t *testing.T) {
	e, fake := startCheckoutAPI(t)
	a := mustShop(t, e, true)
	b := mustShop(t, e, true)
	const notFound = `{"message":"Not Found."}`
	metadata := func(s shop) map[string]string {
		return map[string]string{
			"tenant_id": models.FormatID(s.ID), "audience_member_id": models.FormatID(s.Member.ID),
			"product_id": models.FormatID(s.Product.ID),
		}
	}
	paid := func(account string, md map[string]string) string {
		cs := fake.AddSession(account, psp.SessionObject{
			AmountTotal: 1999, Currency: "usd", Mode: "payment", Metadata: md,
			PaymentStatus: "unpaid", Status: "open",
		})
		fake.Pay(cs.ID)
		return cs.ID
	}
	noPurchases := func(t *testing.T) {
		t.Helper()
		var n int64
		if err := e.DB.Model(&models.Purchase{}).Count(&n).Error; err != nil || n != 0 {
			t.Fatalf("%d purchases (%v), want 0", n, err)
		}
	}

	t.Run("rejects session naming another tenant", func(t *testing.T) {
		cs := paid(a.Account, metadata(b))
		assertBody(t, e.ReturnJSON(t, a.ID, cs), 404, notFound)
		assertBody(t, e.ReturnJSON(t, b.ID, cs), 404, notFound) // not on b's account
		noPurchases(t)
	})
	t.Run("rejects session on another connected account", func(t *testing.T) {
		cs := paid("acct_other", metadata(a))
		assertBody(t, e.ReturnJSON(t, a.ID, cs), 404, notFound)
		noPurchases(t)
	})
	t.Run("rejects session of another tenant's account", func(t *testing.T) {
		cs := paid(b.Account, metadata(a))
		assertBody(t, e.ReturnJSON(t, a.ID, cs), 404, notFound)
		assertBody(t, e.ReturnJSON(t, b.ID, cs), 404, notFound)
		noPurchases(t)
	})
	t.Run("rejects unknown session", func(t *testing.T) {
		assertBody(t, e.ReturnJSON(t, a.ID, "cs_test_nope"), 404, notFound)
	})
	t.Run("rejects unknown tenant", func(t *testing.T) {
		cs := paid(a.Account, metadata(a))
		assertBody(t, e.ReturnJSON(t, 999999, cs), 404, notFound)
		noPurchases(t)
	})
	t.Run("rejects missing parameters", func(t *testing.T) {
		for _, path := range []string{
			"/checkout/return", "/checkout/return?tenant=" + models.FormatID(a.ID),
			"/checkout/return?session_id=cs_test_x", "/checkout/return?tenant=abc&session_id=cs_test_x",
			"/checkout/return?tenant=" + models.FormatID(a.ID) + "&session_id=",
		} {
			assertBody(t, e.Do(t, "GET", path, "", nil, "Accept", "application/json"), 404, notFound)
		}
	})
	t.Run("rejects session for a member unknown to the tenant", func(t *testing.T) {
		md := metadata(a)
		md["audience_member_id"] = models.FormatID(b.Member.ID)
		cs := paid(a.Account, md)
		assertBody(t, e.ReturnJSON(t, a.ID, cs), 404, notFound)
		noPurchases(t)
	})
	if e.QueueLen(t, a.Tenant) != 0 || e.QueueLen(t, b.Tenant) != 0 {
		t.Fatal("an event reached a queue")
	}
}

func TestReturnPageConcurrentVisitsFulfilOnce(t *testing.T) {
	e, fake := startCheckoutAPI(t)
	s := mustShop(t, e, true)
	cs := e.MustCheckout(t, s)
	fake.Pay(cs)

	const n = 10
	var (
		wg     sync.WaitGroup
		start  = make(chan struct{})
		bodies = make([]string, n)
		errs   = make([]error, n)
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			req, _ := http.NewRequest("GET", e.Base+returnPath(s.ID, cs), nil)
			req.Header.Set("Accept", "application/json")
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				errs[i] = err
				return
			}
			defer res.Body.Close()
			b, _ := io.ReadAll(res.Body)
			if res.StatusCode != 200 {
				errs[i] = fmt.Errorf("status %d: %s", res.StatusCode, b)
			}
			bodies[i] = string(b)
		}()
	}
	close(start)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	p := e.assertFulfilledOnce(t, s, cs)
	fulfilled, already := 0, 0
	for _, b := range bodies {
		switch b {
		case returnBody("fulfilled", p.ID):
			fulfilled++
		case returnBody("already_fulfilled", p.ID):
			already++
		default:
			t.Fatalf("unexpected body %s", b)
		}
	}
	if fulfilled != 1 || already != n-1 {
		t.Fatalf("%d fulfilled and %d already_fulfilled, want 1 and %d", fulfilled, already, n-1)
	}
	if got := e.QueueLen(t, s.Tenant); got != 1 {
		t.Fatalf("queue holds %d events, want 1", got)
	}
}

func TestReturnPageChecksMetadataTenantOnPlatformAccount(t *testing.T) {
	// Neither tenant has a connected account: both sessions live on the platform account, so
	// only the return page's metadata check keeps one tenant from fulfilling the other's.
	e, fake := startCheckoutAPI(t)
	p, q := testenv.MustShop(t, e.DB, "", true), testenv.MustShop(t, e.DB, "", true)
	cs := e.MustCheckout(t, q)
	if _, acct, _ := fake.Session(cs); acct != "" {
		t.Fatalf("session on %q, want the platform", acct)
	}
	fake.Pay(cs)

	t.Run("rejects session naming another tenant", func(t *testing.T) {
		assertBody(t, e.ReturnJSON(t, p.ID, cs), 404, `{"message":"Not Found."}`)
		if n := e.rows(t, &models.Purchase{}, p.ID) + e.rows(t, &models.Purchase{}, q.ID); n != 0 {
			t.Fatalf("%d purchases, want 0", n)
		}
	})
	t.Run("fulfils in the tenant the metadata names", func(t *testing.T) {
		res := e.ReturnJSON(t, q.ID, cs)
		assertBody(t, res, 200, returnBody("fulfilled", e.assertFulfilledOnce(t, q, cs).ID))
	})
}
