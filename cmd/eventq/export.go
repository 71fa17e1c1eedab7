package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/eventq/eventq/internal/eventstore"
	"github.com/eventq/eventq/internal/export"
)

// exportPageSize is how many events each query of events export reads; zero means
// export.DefaultPageSize. Tests make it small to cross many pages.
var exportPageSize int

func (c *cli) exportCommand() *cobra.Command {
	var tenantID, from, to, format string
	cmd := &cobra.Command{
		Use:   "export",
		Short: "Write a tenant's stored events to stdout, oldest first, as JSON lines or Parquet",
		Long: `Writes the tenant's stored events created in [--from, --to) (RFC 3339; default: all) to
stdout, ordered by created_at, then id.

--format jsonl (default): one queue event JSON per line, byte for byte as in the queue.
--format parquet: one Parquet file, a column per queue event key: created_at a timestamp
(microseconds, UTC), event_sequence an int64, the others strings; audience_member_id is
optional and null when the event has none.

Events are read in pages of 5,000 and Parquet row groups hold 10,000, so memory does not grow
with the number of events. Nothing is printed but the events.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var q export.Query
			var err error
			if q.From, err = parseBound("--from", from); err != nil {
				return err
			}
			if q.To, err = parseBound("--to", to); err != nil {
				return err
			}
			if err := export.Validate(q); err != nil {
				return err
			}
			exporter, ok := exporters[format]
			if !ok {
				return fmt.Errorf("--format must be jsonl or parquet, got %q", format)
			}
			tenant, err := c.tenant(cmd, tenantID)
			if err != nil {
				return err
			}
			db, err := c.database()
			if err != nil {
				return err
			}
			q.TenantID, q.PageSize = tenant.ID, exportPageSize
			_, err = exporter(cmd.Context(), eventstore.New(db), c.out, q)
			return err
		},
	}
	cmd.Flags().StringVar(&tenantID, "tenant", "", "tenant id (required)")
	cmd.Flags().StringVar(&from, "from", "", "first creation time included, RFC 3339 (default: the oldest event)")
	cmd.Flags().StringVar(&to, "to", "", "first creation time excluded, RFC 3339 (default: none)")
	cmd.Flags().StringVar(&format, "format", "jsonl", "jsonl or parquet")
	return cmd
}

// exporters are the --format values of events export.
var exporters = map[string]func(context.Context, *eventstore.Store, io.Writer, export.Query) (int, error){
	"jsonl":   export.JSONL,
	"parquet": export.Parquet,
}

// parseBound parses an RFC 3339 --from or --to; empty is the zero time (no bound).
func parseBound(flag, value string) (time.Time, error) {
	if value == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339, value)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s must be an RFC 3339 time (YYYY-MM-DDThh:mm:ssZ), got %q", flag, value)
	}
	return t, nil
}
