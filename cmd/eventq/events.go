package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/eventq/eventq/internal/eventstore"
	"github.com/eventq/eventq/models"
)

func (c *cli) eventsCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "events", Short: "Look at stored events"}
	var tenantID string
	var limit int
	list := &cobra.Command{
		Use:   "list",
		Short: "Print a tenant's latest stored events (the database copy), newest last",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 1 || limit > 10000 {
				return fmt.Errorf("--limit must be between 1 and 10000, got %d", limit)
			}
			tenant, err := c.tenant(cmd, tenantID)
			if err != nil {
				return err
			}
			db, err := c.database()
			if err != nil {
				return err
			}
			rows, err := eventstore.New(db).Latest(cmd.Context(), tenant.ID, limit)
			if err != nil {
				return fmt.Errorf("list events: %w", err)
			}
			out := make([]models.QueueEvent, len(rows))
			for i := range rows {
				out[i] = rows[i].Queue()
			}
			return c.print(out)
		},
	}
	list.Flags().StringVar(&tenantID, "tenant", "", "tenant id (required)")
	list.Flags().IntVar(&limit, "limit", 100, "how many events, 1 to 10000")
	cmd.AddCommand(list)
	cmd.AddCommand(c.exportCommand())
	cmd.AddCommand(c.pruneCommand())
	return cmd
}
