// Package export writes a tenant's stored events out of the database as JSON lines or as a
// Parquet file, streaming: the events are read a page at a time, so memory does not grow with
// their number.
package export

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/eventq/eventq/internal/eventstore"
	"github.com/eventq/eventq/internal/turns"
	"github.com/eventq/eventq/models"
)

// DefaultPageSize is how many events one query reads when Query.PageSize is zero.
const DefaultPageSize = eventstore.DefaultPageSize

// Query selects the events to export: those of TenantID created at or after From and before
// To, oldest first (by created_at, then id).
type Query = eventstore.Range

// ErrEmptyRange is returned, before anything is read or written, for a Query whose From is
// not before its To.
var ErrEmptyRange = errors.New("--from must be before --to")

// Validate returns ErrEmptyRange when both bounds are set and From is not before To.
func Validate(q Query) error {
	if !q.From.IsZero() && !q.To.IsZero() && !q.From.Before(q.To) {
		return ErrEmptyRange
	}
	return nil
}

// JSONL writes each selected event to w as the exact bytes of its queue form
// ((*models.TrackedEvent).MarshalQueue) followed by a newline, and returns how many it wrote.
// An invalid query writes nothing. Output is buffered and flushed before JSONL returns.
func JSONL(ctx context.Context, db *eventstore.Store, w io.Writer, q Query) (int, error) {
	if err := Validate(q); err != nil {
		return 0, err
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	n, err := db.Pages(ctx, q, func(page []models.TrackedEvent) error {
		for i := range page {
			if _, err := bw.Write(append(page[i].MarshalQueue(), '\n')); err != nil {
				return fmt.Errorf("export: write: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return n, err
	}
	if err := bw.Flush(); err != nil {
		return n, fmt.Errorf("export: write: %w", err)
	}
	return n, nil
}

// Each calls fn with every selected event, oldest first, a page at a time (as JSONL reads
// them), and returns how many it passed. fn must not keep the event.
func Each(ctx context.Context, db *eventstore.Store, q Query, fn func(*models.TrackedEvent) error) (int, error) {
	if err := Validate(q); err != nil {
		return 0, err
	}
	return db.Pages(ctx, q, func(page []models.TrackedEvent) error {
		for i := range page {
			if err := fn(&page[i]); err != nil {
				return err
			}
		}
		return nil
	})
}

// Exporter reads stored events for the HTTP routes, which hold no database of their own. An
// export reads every stored event of its tenant that may match, so a tenant runs one at a
// time in a process (Begin).
type Exporter struct {
	db      *eventstore.Store
	running turns.Turns
}

// New returns an Exporter on the stored events.
func New(events *eventstore.Store) *Exporter { return &Exporter{db: events} }

// Begin claims tenantID's one export of this process: ok is false while another runs, and
// done ends the claim (once).
func (e *Exporter) Begin(tenantID uint64) (done func(), ok bool) { return e.running.Try(tenantID, 1) }

// Each is Each on the Exporter's database.
func (e *Exporter) Each(ctx context.Context, q Query, fn func(*models.TrackedEvent) error) (int, error) {
	return Each(ctx, e.db, q, fn)
}
