package psp

import (
	"context"
	"fmt"
	"time"

	"github.com/stripe/stripe-go/v76"
)

// listPageSize is how many events one page of the provider's event list holds (its maximum).
const listPageSize = 100

// ListEvents calls fn with every event of types created at or after since on account ("" for
// the platform), following the list's pagination, newest first as the provider returns them.
// An event listed on a connected account carries that account even if the provider left it
// out. It stops at the first error of the provider or of fn.
func (c *Client) ListEvents(ctx context.Context, account string, types []string, since time.Time, fn func(*stripe.Event) error) error {
	if !c.hasKey {
		return ErrNoKey
	}
	params := &stripe.EventListParams{
		Types:        stripe.StringSlice(types),
		CreatedRange: &stripe.RangeQueryParams{GreaterThanOrEqual: since.Unix()},
	}
	params.Limit = stripe.Int64(listPageSize)
	params.Context = ctx
	if account != "" {
		params.SetStripeAccount(account)
	}
	it := c.api.Events.List(params)
	for it.Next() {
		ev := it.Event()
		if ev.Account == "" {
			ev.Account = account
		}
		if err := fn(ev); err != nil {
			return err
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("psp: list events on %q: %v: %w", account, err, ErrProvider)
	}
	return nil
}
