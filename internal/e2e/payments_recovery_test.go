package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eventq/eventq/internal/payments"
	"github.com/eventq/eventq/internal/psp"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/models"
)

// CLI runs the eventq binary with the stack's environment plus extra, and returns its exit
// code, stdout and stderr.
func (s *stack) CLI(t *testing.T, extra []string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "eventq"), args...)
	cmd.Env = append(append(s.Env[:len(s.Env):len(s.Env)], "APP_URL="+s.Base), extra...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, out.String(), errOut.String()
	case errors.As(err, &exit):
		return exit.ExitCode(), out.String(), errOut.String()
	}
	t.Fatalf("run eventq: %v", err)
	return 0, "", ""
}

// MustReconcile runs `eventq psp reconcile` and returns its result.
func (s *stack) MustReconcile(t *testing.T) (checked, enqueued int) {
	t.Helper()
	code, stdout, stderr := s.CLI(t, nil, "psp", "reconcile")
	var res struct{ Checked, Enqueued int }
	if code != 0 || json.Unmarshal([]byte(stdout), &res) != nil {
		t.Fatalf("eventq psp reconcile: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	t.Logf("eventq psp reconcile: %s", strings.TrimSpace(stdout))
	return res.Checked, res.Enqueued
}

// Missed deliveries, deliveries racing reconciliations, and a second reconciliation, through
// the real api, worker and CLI: every paid session is fulfilled once.
func TestReconcileThroughTheStack(t *testing.T) {
	s := startStack(t, withEnv("PSP_RECONCILE_INTERVAL=off"))
	sh := s.MustShop(t, "acct_recon", true)

	missed := s.PaidSession(sh, "acct_recon")
	missedID, _ := s.PSP.Complete(missed.ID)
	var raced []string
	var payloads [][]byte
	for i := 0; i < 6; i++ {
		cs := s.PaidSession(sh, "acct_recon")
		id, b := s.PSP.Complete(cs.ID)
		raced, payloads = append(raced, id), append(payloads, b)
	}
	var wg sync.WaitGroup
	for _, b := range payloads {
		wg.Add(1)
		go func(b []byte) { defer wg.Done(); s.MustDeliver(t, b) }(b)
	}
	enqueued := make([]int, 2)
	for i := range enqueued {
		wg.Add(1)
		go func(i int) { defer wg.Done(); _, enqueued[i] = s.MustReconcile(t) }(i)
	}
	wg.Wait()
	if enqueued[0]+enqueued[1] < 1 || enqueued[0]+enqueued[1] > 7 {
		t.Errorf("the racing reconciliations queued %v, want between 1 (the missed one) and 7", enqueued)
	}
	for _, id := range append(raced, missedID) {
		testenv.Eventually(t, 30*time.Second, "task "+id+" completes", func() bool { return s.TaskState(id) == "completed" })
	}
	if n := s.Count(t, &models.Purchase{}, "tenant_id = ?", sh.Tenant.ID); n != 7 {
		t.Fatalf("%d purchases, want 7", n)
	}
	if n := s.Count(t, &models.TrackedEvent{}, "tenant_id = ? AND type = ?", sh.Tenant.ID, payments.EventPurchaseCompleted); n != 7 {
		t.Fatalf("%d purchase_completed events, want 7", n)
	}
	t.Run("a second run changes nothing", func(t *testing.T) {
		checked, enq := s.MustReconcile(t)
		if checked != 7 || enq != 0 {
			t.Errorf("second run: checked %d, enqueued %d; want 7, 0", checked, enq)
		}
		if n := s.Count(t, &models.Purchase{}, "1 = 1"); n != 7 {
			t.Errorf("%d purchases, want 7", n)
		}
	})
}

// A full refund delivered to the real api revokes the purchase and queues purchase_refunded;
// a partial one does not.
func TestRefundThroughTheStack(t *testing.T) {
	s := startStack(t)
	sh := s.MustShop(t, "acct_refund", true)
	full := s.PaidSession(sh, "acct_refund")
	partial := s.PaidSession(sh, "acct_refund")
	for _, cs := range []psp.SessionObject{full, partial} {
		id, b := s.PSP.Complete(cs.ID)
		s.MustDeliver(t, b)
		testenv.Eventually(t, 20*time.Second, "fulfilment", func() bool { return s.TaskState(id) == "completed" })
	}
	var refundIDs []string
	for _, r := range []struct {
		pi     string
		amount int64
	}{{*full.PaymentIntent, 1999}, {*partial.PaymentIntent, 999}} {
		id, b := s.PSP.Refund("acct_refund", r.pi, 1999, r.amount)
		s.MustDeliver(t, b)
		s.MustDeliver(t, b)
		refundIDs = append(refundIDs, id)
	}
	for _, id := range refundIDs {
		testenv.Eventually(t, 20*time.Second, "refund task", func() bool { return s.TaskState(id) == "completed" })
	}
	for cs, want := range map[string]string{full.ID: models.PurchaseRefunded, partial.ID: models.PurchasePaid} {
		var p models.Purchase
		testenv.Must(t, s.DB.Take(&p, "psp_checkout_session_id = ?", cs).Error)
		inForce := s.Count(t, &models.Entitlement{}, "purchase_id = ? AND revoked_at IS NULL", p.ID)
		if p.Status != want || (inForce == 1) != (want == models.PurchasePaid) {
			t.Errorf("session %s: status %s, entitlements in force %d; want %s", cs, p.Status, inForce, want)
		}
	}
	if n := s.Count(t, &models.TrackedEvent{}, "tenant_id = ? AND type = ?", sh.Tenant.ID, payments.EventPurchaseRefunded); n != 1 {
		t.Errorf("%d purchase_refunded events, want 1", n)
	}
}

// `eventq webhook send` against the running api: exit 0 with the api's secret, exit 1 naming
// PSP_WEBHOOK_SECRET with another one.
func TestWebhookSendAgainstTheStack(t *testing.T) {
	s := startStack(t)
	sh := s.MustShop(t, "acct_send", true)
	args := []string{"webhook", "send", "--tenant", models.FormatID(sh.Tenant.ID), "--member", models.FormatID(sh.Member.ID),
		"--product", models.FormatID(sh.Product.ID)}

	code, stdout, stderr := s.CLI(t, []string{"PSP_WEBHOOK_SECRET=whsec_stale"}, args...)
	if code != 1 || stdout != "" || !strings.Contains(stderr, "PSP_WEBHOOK_SECRET") {
		t.Errorf("with a stale secret: exit %d, stdout %q, stderr %q; want exit 1 naming PSP_WEBHOOK_SECRET", code, stdout, stderr)
	}
	code, stdout, stderr = s.CLI(t, []string{"PSP_WEBHOOK_SECRET=" + webhookSecret}, args...)
	if code != 0 || stderr != "" {
		t.Fatalf("with the api's secret: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	testenv.Eventually(t, 20*time.Second, "the sent checkout is fulfilled", func() bool {
		return s.Count(t, &models.Purchase{}, "tenant_id = ?", sh.Tenant.ID) == 1
	})
	if n := s.Count(t, &models.Purchase{}, "1 = 1"); n != 1 {
		t.Errorf("%d purchases, want 1 (the stale-secret event must not count)", n)
	}

	t.Run("a refund, then a dispute, of purchases it made revoke them", func(t *testing.T) {
		code, _, stderr := s.CLI(t, []string{"PSP_WEBHOOK_SECRET=" + webhookSecret}, args...) // a second purchase
		if code != 0 {
			t.Fatalf("second checkout: exit %d, stderr %q", code, stderr)
		}
		testenv.Eventually(t, 20*time.Second, "the second checkout is fulfilled", func() bool {
			return s.Count(t, &models.Purchase{}, "tenant_id = ?", sh.Tenant.ID) == 2
		})
		var purchases []models.Purchase
		testenv.Must(t, s.DB.Where("tenant_id = ?", sh.Tenant.ID).Order("id").Find(&purchases).Error)
		for i, c := range []struct{ typ, status, event string }{
			{"charge.refunded", models.PurchaseRefunded, payments.EventPurchaseRefunded},
			{"charge.dispute.created", models.PurchaseDisputed, payments.EventPurchaseDisputed},
		} {
			p := purchases[i]
			code, stdout, stderr := s.CLI(t, []string{"PSP_WEBHOOK_SECRET=" + webhookSecret}, "webhook", "send",
				"--tenant", models.FormatID(sh.Tenant.ID), "--type", c.typ, "--purchase", models.FormatID(p.ID))
			if code != 0 || stderr != "" || !strings.Contains(stdout, `"checkout_session_id":"`+p.PSPCheckoutSessionID+`"`) {
				t.Fatalf("%s: exit %d, stdout %q, stderr %q", c.typ, code, stdout, stderr)
			}
			testenv.Eventually(t, 20*time.Second, c.typ+" ends the purchase", func() bool {
				var got models.Purchase
				return s.DB.Take(&got, p.ID).Error == nil && got.Status == c.status
			})
			if n := s.Count(t, &models.Entitlement{}, "purchase_id = ? AND revoked_at IS NULL", p.ID); n != 0 {
				t.Errorf("%s: %d entitlements in force, want 0", c.typ, n)
			}
			if n := s.Count(t, &models.TrackedEvent{}, "tenant_id = ? AND type = ?", sh.Tenant.ID, c.event); n != 1 {
				t.Errorf("%s: %d %s events, want 1", c.typ, n, c.event)
			}
		}
	})
}
