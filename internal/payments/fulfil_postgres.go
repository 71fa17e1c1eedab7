package payments

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/eventq/eventq/internal/eventstore"
)

// storeStatement is a fulfilment on Postgres in one statement, so in one round trip and one
// implicit transaction. v holds the session's tenant, member and product when they exist, the
// member and product on that tenant, and the session is on the tenant's account (none
// otherwise). From v it writes the purchase, unless a reversal of its payment is waiting or
// another fulfilment stored it first, and with the purchase's new id the entitlement and the
// purchase_completed event; for a member erased meanwhile, no entitlement and an event that
// names no member. It answers whether v held a row, the new purchase's id (NULL when none was
// stored), whether a reversal is waiting and whether the member is not erased. Its parameters, $1 to $20, are in the
// order of storeOneStatement's args.
var storeStatement = `WITH v AS (
	SELECT t.id AS tenant, m.id AS member, p.id AS product, CAST($4 AS timestamptz) AS at,
		CAST($5 AS text) AS session, CAST($6 AS text) AS payment_intent, m.erased_at IS NULL AS live
	FROM tenants t
	JOIN audience_members m ON m.tenant_id = $1 AND m.id = $2
	JOIN products p ON p.tenant_id = $1 AND p.id = $3
	WHERE t.id = $1 AND COALESCE(t.psp_account_id, '') = $7
), reversal AS (
	SELECT 1 FROM purchase_reversals, v
	WHERE psp_payment_intent_id = v.payment_intent AND account = $7 AND applied_at IS NULL
	LIMIT 1
), purchase AS (
	INSERT INTO purchases (tenant_id, audience_member_id, product_id, psp_checkout_session_id,
		psp_payment_intent_id, amount_total, currency, status, created_at, updated_at)
	SELECT tenant, member, product, session, payment_intent, CAST($8 AS bigint),
		CAST($9 AS text), CAST($10 AS text), at, at
	FROM v WHERE NOT EXISTS (SELECT 1 FROM reversal)
	ON CONFLICT (tenant_id, psp_checkout_session_id) DO NOTHING
	RETURNING id
), entitlement AS (
	INSERT INTO entitlements (tenant_id, audience_member_id, product_id, purchase_id, created_at, updated_at)
	SELECT tenant, member, product, purchase.id, at, at FROM v, purchase WHERE v.live
), event AS (
	` + eventstore.InsertInto() + `
	SELECT CAST($11 AS text), tenant, CAST($12 AS text), session,
		CASE WHEN v.live THEN CAST($13 AS text) END, CAST($14 AS text), CAST($15 AS text), CAST($16 AS text),
		CAST($17 AS text), CAST($18 AS text), CAST($19 AS bigint),
		CAST($20 AS boolean), CAST($20 AS boolean), at
	FROM v, purchase
)
SELECT EXISTS (SELECT 1 FROM v) AS resolved, (SELECT id FROM purchase) AS purchase_id,
	EXISTS (SELECT 1 FROM reversal) AS reversal_waiting, COALESCE((SELECT live FROM v), true) AS live`

// storeOneStatement is store's common case on Postgres, in one round trip where resolve and
// storeTx take seven. ok is false when nothing was written because r does not resolve or a
// reversal of the payment is waiting: resolve then says why, or storeTx stores the fulfilment
// and applies the reversal in its transaction. A purchase that another fulfilment stored
// costs one more round trip, to load it.
func (svc *Service) storeOneStatement(ctx context.Context, s Session, r refs, queued bool) (st stored, ok bool, err error) {
	p, ev := svc.newPurchase(s, r, queued)
	args := []any{ // in the order of storeStatement's parameters
		r.tenant, r.member, r.product, p.CreatedAt, p.PSPCheckoutSessionID, p.PSPPaymentIntentID, s.Account,
		p.AmountTotal, p.Currency, p.Status, ev.ID, ev.Type, ev.AudienceMemberID, ev.URL,
		ev.PageHostname, ev.PagePath, ev.UserAgent, ev.IPAddress, ev.EventSequence, queued,
	}
	var (
		resolved, reversalWaiting, live bool
		purchaseID                      sql.NullInt64
	)
	// Straight to the connection pool, not through gorm, whose building of the statement from
	// its parameters cost as much CPU as the round trip; gorm's logger still sees it.
	db := svc.DB.WithContext(ctx)
	begin := time.Now()
	err = db.Statement.ConnPool.QueryRowContext(ctx, storeStatement, args...).Scan(&resolved, &purchaseID, &reversalWaiting, &live)
	db.Logger.Trace(ctx, begin, func() (string, int64) { return storeStatement, 1 }, err)
	if err != nil {
		return stored{}, false, fmt.Errorf("fulfil: store: %w", err)
	}
	switch {
	case purchaseID.Valid:
		p.ID = uint64(purchaseID.Int64)
		if !live {
			ev.AudienceMemberID = nil
		}
		return stored{res: Result{Status: StatusFulfilled, PurchaseID: p.ID}, purchase: p, event: ev}, true, nil
	case !resolved || reversalWaiting:
		return stored{}, false, nil
	}
	err = svc.alreadyStored(db, s, r.tenant, &st)
	return st, err == nil, err
}
