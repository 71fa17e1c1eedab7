package payments

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/stripe/stripe-go/v76"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/eventq/eventq/internal/clock"
	"github.com/eventq/eventq/internal/metrics"
	"github.com/eventq/eventq/internal/psp"
	"github.com/eventq/eventq/models"
)

// DefaultReconcileSince is how far back a reconciliation looks when nothing says otherwise:
// the first periodic run, and `eventq psp reconcile` without --since. It covers the
// provider's redelivery period (about three days).
const DefaultReconcileSince = 72 * time.Hour

// ReconcileOverlap is how far before the end of the last successful run the next periodic run
// starts, so events that became visible late in the provider's list are not skipped.
const ReconcileOverlap = 10 * time.Minute

// reconcileScope is the watermark's key for the periodic run over every account.
const reconcileScope = "psp:all"

// ReconcileOptions selects what one reconciliation looks at.
type ReconcileOptions struct {
	// Since is the creation time of the oldest event looked at.
	Since time.Time
	// TenantID, when not 0, limits the run to that tenant's account and its checkouts.
	TenantID uint64
}

// ReconcileResult is what one reconciliation did: Checked events listed, Enqueued of them
// found unprocessed and queued.
type ReconcileResult struct {
	Checked  int `json:"checked"`
	Enqueued int `json:"enqueued"`
}

// Reconciler compares the provider's event list with what eventq processed. It is safe to
// run concurrently with itself and with webhook deliveries: every event goes through the task
// the webhook would enqueue, under the same task id, and its handler is idempotent.
type Reconciler struct {
	DB  *gorm.DB
	PSP *psp.Client
	// Queue takes the events found unprocessed, as it takes the webhook's.
	Queue   EventTasks
	Clock   clock.Clock
	Log     *slog.Logger
	Metrics *metrics.Metrics // may be nil
}

// Run lists the events of the handled types created since opts.Since on the platform and on
// every tenant's connected account (or only opts.TenantID's), and enqueues each one that was
// not processed yet. It stops at the first error; what it enqueued until then stays queued.
func (r *Reconciler) Run(ctx context.Context, opts ReconcileOptions) (ReconcileResult, error) {
	var res ReconcileResult
	accounts, err := r.accounts(ctx, opts.TenantID)
	if err != nil {
		return res, err
	}
	for _, account := range accounts {
		err := r.PSP.ListEvents(ctx, account, HandledTypes(), opts.Since, func(ev *stripe.Event) error {
			if opts.TenantID != 0 && !ofTenant(ev, opts.TenantID) {
				return nil
			}
			res.Checked++
			queued, err := r.reconcileEvent(ctx, ev)
			if queued {
				res.Enqueued++
			}
			return err
		})
		if err != nil {
			return res, err
		}
	}
	return res, nil
}

// accounts lists the accounts to look at: the platform ("") and every tenant's connected
// account, or only tenantID's.
func (r *Reconciler) accounts(ctx context.Context, tenantID uint64) ([]string, error) {
	db := r.DB.WithContext(ctx)
	if tenantID != 0 {
		var t models.Tenant
		if err := db.Take(&t, tenantID).Error; err != nil {
			if errors.Is(err, gorm.ErrRecordNotFound) {
				return nil, fmt.Errorf("reconcile: tenant %d not found", tenantID)
			}
			return nil, fmt.Errorf("reconcile: load tenant: %w", err)
		}
		return []string{t.Account()}, nil
	}
	var ids []string
	err := db.Model(&models.Tenant{}).Where("psp_account_id IS NOT NULL AND psp_account_id <> ''").
		Distinct().Order("psp_account_id").Pluck("psp_account_id", &ids).Error
	if err != nil {
		return nil, fmt.Errorf("reconcile: list accounts: %w", err)
	}
	return append([]string{""}, ids...), nil
}

// ofTenant reports whether ev may concern tenantID: checkouts say so in their metadata;
// charges are matched to purchases by payment intent later, so they are kept.
func ofTenant(ev *stripe.Event, tenantID uint64) bool {
	if object, _ := EventObject(string(ev.Type)); object != ObjectCheckoutSession {
		return true
	}
	s, err := decodeSession(ev)
	return err == nil && s.Metadata[MetaTenant] == models.FormatID(tenantID)
}

// reconcileEvent enqueues ev's task unless the database already reflects it (its checkout has
// a purchase, its refund or dispute is recorded, it is a partial refund), the event can never
// be processed, or its task is queued already; it reports whether it enqueued.
func (r *Reconciler) reconcileEvent(ctx context.Context, ev *stripe.Event) (bool, error) {
	if ev.ID == "" || ev.Data == nil {
		return false, nil
	}
	w, err := workOf(ev)
	if err != nil {
		return false, nil // a type the list should not have returned, or one the task would refuse
	}
	done, err := w.done(ctx, r.DB)
	if err != nil || done {
		if err != nil {
			err = fmt.Errorf("reconcile: %w", err)
		}
		return false, err
	}
	payload, err := json.Marshal(ev)
	if err != nil {
		return false, fmt.Errorf("reconcile: encode event %s: %w", ev.ID, err)
	}
	err = r.Queue.Enqueue(ctx, ev.ID, string(ev.Type), payload)
	switch {
	case errors.Is(err, ErrAlreadyQueued): // delivered (or reconciled) and queued already
		return false, nil
	case err != nil:
		return false, fmt.Errorf("reconcile: enqueue %s: %w", ev.ID, err)
	}
	r.Log.Info("reconcile: queued an event whose delivery never came", "event_id", ev.ID, "type", string(ev.Type), "account", ev.Account)
	return true, nil
}

// RunPeriodic is one periodic reconciliation over every account: it starts where the last
// successful one ended minus ReconcileOverlap (DefaultReconcileSince back the first time),
// and on success moves that mark to its own start. The mark only moves forward.
func (r *Reconciler) RunPeriodic(ctx context.Context) (ReconcileResult, error) {
	start := r.Clock.Now().UTC()
	since := start.Add(-DefaultReconcileSince)
	var mark models.ReconcileMark
	err := r.DB.WithContext(ctx).Where("scope = ?", reconcileScope).Take(&mark).Error
	switch {
	case err == nil:
		since = mark.ReconciledUntil.Add(-ReconcileOverlap)
	case !errors.Is(err, gorm.ErrRecordNotFound):
		return ReconcileResult{}, fmt.Errorf("reconcile: load mark: %w", err)
	}
	res, err := r.Run(ctx, ReconcileOptions{Since: since})
	r.Metrics.Reconciled(err == nil, r.Clock.Now(), res.Enqueued)
	if err != nil {
		r.Log.Warn("reconcile: run failed", "since", since, "checked", res.Checked, "enqueued", res.Enqueued, "err", err)
		return res, err
	}
	mark = models.ReconcileMark{Scope: reconcileScope, ReconciledUntil: start}
	err = r.DB.WithContext(ctx).Clauses(clause.OnConflict{
		Columns:   []clause.Column{{Name: "scope"}},
		DoUpdates: clause.AssignmentColumns([]string{"reconciled_until", "updated_at"}),
		Where:     clause.Where{Exprs: []clause.Expression{clause.Expr{SQL: "reconcile_marks.reconciled_until < excluded.reconciled_until"}}},
	}).Create(&mark).Error
	if err != nil {
		return res, fmt.Errorf("reconcile: store mark: %w", err)
	}
	r.Log.Info("reconcile: run done", "since", since, "checked", res.Checked, "enqueued", res.Enqueued)
	return res, nil
}
