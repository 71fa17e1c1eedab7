package payments_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"

	"gorm.io/gorm"

	"github.com/eventq/eventq/internal/clock"
	"github.com/eventq/eventq/internal/eventstore"
	"github.com/eventq/eventq/internal/payments"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/models"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const appURL = "https://app.example"

// queueing is a fixed answer to "are this tenant's events queued?".
type queueing bool

func (q queueing) Queues(context.Context, uint64) (bool, error) { return bool(q), nil }

// fakePusher records what fulfilment and revocation hand to the tenant's queue. Like the
// queue's append, it skips an event whose id it has seen. before, when set, runs at the start
// of the next push (and is then cleared), to interleave other work with it.
type fakePusher struct {
	mu     sync.Mutex
	pushed []models.TrackedEvent
	seen   map[string]bool
	before func()
}

func (p *fakePusher) PushPending(_ context.Context, _ uint64, rows []models.TrackedEvent) {
	p.mu.Lock()
	before := p.before
	p.before = nil
	p.mu.Unlock()
	if before != nil {
		before()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.seen == nil {
		p.seen = map[string]bool{}
	}
	for _, ev := range rows {
		if !p.seen[ev.ID] {
			p.seen[ev.ID] = true
			p.pushed = append(p.pushed, ev)
		}
	}
}

func (p *fakePusher) types() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]string, len(p.pushed))
	for i, ev := range p.pushed {
		out[i] = ev.Type
	}
	return out
}

func (p *fakePusher) events() []models.TrackedEvent {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]models.TrackedEvent(nil), p.pushed...)
}

// env is a Service on a fresh database with a fake Pusher; nothing else is real.
type env struct {
	DB     *gorm.DB
	Pusher *fakePusher
	Svc    *payments.Service
}

func newEnv(t *testing.T, queued bool) *env {
	t.Helper()
	db, _ := testenv.DB(t)
	p := &fakePusher{}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	svc := &payments.Service{DB: db, Events: eventstore.New(db), Clock: clock.Real{}, Queueing: queueing(queued), Ingest: p, AppURL: appURL, Log: log}
	return &env{DB: db, Pusher: p, Svc: svc}
}

// shop is a tenant on account ("" for the platform) with one member and one product.
type shop = testenv.Shop

var serial atomic.Int64

// MustShop creates a shop on account; whether it queues events is the env's queueing.
func (e *env) MustShop(t *testing.T, account string) shop {
	t.Helper()
	return testenv.MustShop(t, e.DB, account, false)
}

// Session is a paid session of s on its tenant's account, with a fresh id and payment intent.
func (e *env) Session(s shop) payments.Session {
	n := serial.Add(1)
	return payments.Session{
		ID: fmt.Sprintf("cs_test_%d", n), Account: s.Tenant.Account(), PaymentStatus: "paid",
		PaymentIntent: fmt.Sprintf("pi_%d", n), AmountTotal: 1999, Currency: "usd",
		Metadata: payments.Metadata(s.Tenant.ID, s.Member.ID, s.Product.ID),
	}
}

// Count counts rows of model matching query.
func (e *env) Count(t *testing.T, model any, query string, args ...any) int64 {
	t.Helper()
	var n int64
	testenv.Must(t, e.DB.Model(model).Where(query, args...).Count(&n).Error)
	return n
}
