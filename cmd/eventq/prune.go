package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/eventq/eventq/internal/retention"
	"github.com/eventq/eventq/models"
)

func (c *cli) pruneCommand() *cobra.Command {
	var dryRun bool
	var asOf string
	cmd := &cobra.Command{
		Use:   "prune",
		Short: "Apply EVENT_RETENTION to the stored events now (the queues in Redis are not touched)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			at := c.clock.Now()
			if asOf != "" {
				t, err := time.Parse(time.RFC3339, asOf)
				if err != nil {
					return fmt.Errorf("--as-of must be an RFC 3339 time (YYYY-MM-DDThh:mm:ssZ), got %q", asOf)
				}
				at = t
			}
			cfg, err := c.config()
			if err != nil {
				return err
			}
			if cfg.Retention.Keep <= 0 {
				return retention.ErrOff
			}
			a, err := c.application()
			if err != nil {
				return err
			}
			p := *a.Retention
			p.Log = nil // no log lines: the command prints the outcome itself
			res, err := p.Prune(cmd.Context(), at, dryRun)
			if err != nil {
				return err
			}
			return c.print(map[string]any{"cutoff": res.Cutoff.UTC().Format(models.TimeFormat), "deleted": res.Deleted})
		},
	}
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "count what would be deleted, delete nothing")
	cmd.Flags().StringVar(&asOf, "as-of", "", "apply the retention as if it were this RFC 3339 time (default: now)")
	return cmd
}
