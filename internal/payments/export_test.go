package payments

import (
	"context"
	"time"
)

// Test-only access to the fulfilment and the revocation that HandleEvent and Return perform,
// for the tests that do not go through an event.

// Reversal is reversal.
type Reversal = reversal

// Revoke is revoke.
func (svc *Service) Revoke(ctx context.Context, r Reversal) (string, error) {
	return svc.revoke(ctx, r)
}

// Fulfil is fulfil.
func (svc *Service) Fulfil(ctx context.Context, s Session) (Result, error) { return svc.fulfil(ctx, s) }

// FulfilInTransaction is Fulfil storing in a transaction of several statements on Postgres
// too, as on SQLite.
func (svc *Service) FulfilInTransaction(ctx context.Context, s Session) (Result, error) {
	return svc.fulfilSession(ctx, s, false)
}

// EventID is eventID.
func EventID(typ string, at time.Time, sessionID string) string { return eventID(typ, at, sessionID) }
