package payments

import (
	"context"
	"errors"
	"strconv"
	"time"

	"golang.org/x/sync/singleflight"
	"gorm.io/gorm"

	"github.com/eventq/eventq/internal/cache"
	"github.com/eventq/eventq/internal/clock"
	"github.com/eventq/eventq/models"
)

// ReturnInterval is how often the return page asks the provider about one session, at most,
// per process: visits in between get the last answer.
const ReturnInterval = time.Second

// Returns remembers each session's last return-page answer for ReturnInterval and lets one
// visit at a time ask the provider about a session (visits meanwhile share its answer), so
// that however often the unauthenticated page is hit (reloads, a script) a session costs the
// platform's provider rate limit at most one call a second per api process.
type Returns struct {
	last   *cache.TTL[returnKey, returnAnswer]
	asking singleflight.Group
}

type returnKey struct {
	tenant  uint64
	session string
}

type returnAnswer struct {
	res Result
	err error
}

// answered is a remembered answer as a later visit gets it: the purchase another visit
// created is already fulfilled for this one.
func (a returnAnswer) answered() (Result, error) {
	if a.res.Status == StatusFulfilled {
		a.res.Status = StatusAlreadyFulfilled
	}
	return a.res, a.err
}

// NewReturns returns an empty Returns timed by clk. It is safe for concurrent use.
func NewReturns(clk clock.Clock) *Returns {
	return &Returns{last: cache.New[returnKey, returnAnswer](ReturnInterval, clk)}
}

// answer returns the session's last answer if it is under ReturnInterval old, else ask's,
// asking once at a time per session: a visit that shared another's question gets its answer
// (StatusFulfilled read as StatusAlreadyFulfilled).
func (r *Returns) answer(key returnKey, ask func() (Result, error)) (Result, error) {
	if r == nil {
		return ask()
	}
	if a, ok := r.last.Get(key); ok {
		return a.answered()
	}
	asked := false
	v, _, _ := r.asking.Do(strconv.FormatUint(key.tenant, 10)+"|"+key.session, func() (any, error) {
		asked = true
		res, err := ask()
		a := returnAnswer{res, err}
		if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
			r.last.Add(key, a)
		}
		return a, nil
	})
	a := v.(returnAnswer)
	if asked {
		return a.res, a.err
	}
	return a.answered()
}

// fulfilledReturn is the return page's answer from the database alone: the tenant's purchase of
// sessionID, if one was stored (StatusAlreadyFulfilled), without asking the provider.
func (svc *Service) fulfilledReturn(ctx context.Context, tenantID uint64, sessionID string) (Result, bool, error) {
	var p models.Purchase
	err := svc.DB.WithContext(ctx).Select("id").
		Where("psp_checkout_session_id = ? AND tenant_id = ?", sessionID, tenantID).Take(&p).Error
	switch {
	case errors.Is(err, gorm.ErrRecordNotFound):
		return Result{}, false, nil
	case err != nil:
		return Result{}, false, err
	}
	return Result{Status: StatusAlreadyFulfilled, PurchaseID: p.ID}, true, nil
}
