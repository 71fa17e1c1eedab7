package payments

import (
	"context"
	"fmt"
)

// storeStatement is a fulfilment on Postgres in one statement, so in one round trip and one
// implicit transaction. v holds the session's tenant, member and product when they exist, the
// member and product on that tenant, and the session is on the tenant's account (none
// otherwise). From v it writes the purchase, unless a reversal of its payment is waiting or
// another fulfilment stored it first, and with the purchase's new id the entitlement and the
// purchase_completed event. It answers whether v held a row, the new purchase's id (NULL when
// none was stored) and whether a reversal is waiting.
const storeStatement = `WITH v AS (
	SELECT t.id AS tenant, m.id AS member, p.id AS product, CAST(@at AS timestamptz) AS at,
		CAST(@session AS text) AS session, CAST(@payment_intent AS text) AS payment_intent
	FROM tenants t
	JOIN audience_members m ON m.id = @member AND m.tenant_id = t.id
	JOIN products p ON p.id = @product AND p.tenant_id = t.id
	WHERE t.id = @tenant AND COALESCE(t.psp_account_id, '') = @account
), reversal AS (
	SELECT 1 FROM purchase_reversals, v
	WHERE psp_payment_intent_id = v.payment_intent AND account = @account AND applied_at IS NULL
	LIMIT 1
), purchase AS (
	INSERT INTO purchases (tenant_id, audience_member_id, product_id, psp_checkout_session_id,
		psp_payment_intent_id, amount_total, currency, status, created_at, updated_at)
	SELECT tenant, member, product, session, payment_intent, CAST(@amount AS bigint),
		CAST(@currency AS text), CAST(@status AS text), at, at
	FROM v WHERE NOT EXISTS (SELECT 1 FROM reversal)
	ON CONFLICT (psp_checkout_session_id) DO NOTHING
	RETURNING id
), entitlement AS (
	INSERT INTO entitlements (tenant_id, audience_member_id, product_id, purchase_id, created_at, updated_at)
	SELECT tenant, member, product, purchase.id, at, at FROM v, purchase
), event AS (
	INSERT INTO tracked_events (id, tenant_id, type, session_id, audience_member_id, url, page_hostname,
		page_path, user_agent, ip_address, event_sequence, queued, queue_pending, created_at)
	SELECT CAST(@event_id AS text), tenant, CAST(@event_type AS text), session,
		CAST(@event_member AS text), CAST(@url AS text), CAST(@hostname AS text), CAST(@path AS text),
		CAST(@user_agent AS text), CAST(@ip AS text), CAST(@sequence AS bigint),
		CAST(@queued AS boolean), CAST(@queued AS boolean), at
	FROM v, purchase
)
SELECT EXISTS (SELECT 1 FROM v) AS resolved, (SELECT id FROM purchase) AS purchase_id,
	EXISTS (SELECT 1 FROM reversal) AS reversal_waiting`

// storeOneStatement is store's common case on Postgres, in one round trip where resolve and
// storeTx take seven. ok is false when nothing was written because r does not resolve or a
// reversal of the payment is waiting: resolve then says why, or storeTx stores the fulfilment
// and applies the reversal in its transaction. A purchase that another fulfilment stored
// costs one more round trip, to load it.
func (svc *Service) storeOneStatement(ctx context.Context, s Session, r refs, queued bool) (st stored, ok bool, err error) {
	p, ev := svc.newPurchase(s, r, queued)
	args := map[string]any{
		"tenant": r.tenant, "member": r.member, "product": r.product, "account": s.Account,
		"session": p.PSPCheckoutSessionID, "payment_intent": p.PSPPaymentIntentID,
		"amount": p.AmountTotal, "currency": p.Currency, "status": p.Status, "at": p.CreatedAt,
		"event_id": ev.ID, "event_type": ev.Type, "event_member": ev.AudienceMemberID, "url": ev.URL,
		"hostname": ev.PageHostname, "path": ev.PagePath, "user_agent": ev.UserAgent, "ip": ev.IPAddress,
		"sequence": ev.EventSequence, "queued": queued,
	}
	var row struct {
		Resolved        bool
		PurchaseID      *uint64
		ReversalWaiting bool
	}
	db := svc.DB.WithContext(ctx)
	if err := db.Raw(storeStatement, args).Scan(&row).Error; err != nil {
		return stored{}, false, fmt.Errorf("fulfil: store: %w", err)
	}
	switch {
	case row.PurchaseID != nil:
		p.ID = *row.PurchaseID
		return stored{res: Result{Status: StatusFulfilled, PurchaseID: p.ID}, purchase: p, event: ev}, true, nil
	case !row.Resolved || row.ReversalWaiting:
		return stored{}, false, nil
	}
	err = svc.alreadyStored(db, s, &st)
	return st, err == nil, err
}
