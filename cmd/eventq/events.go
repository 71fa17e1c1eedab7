package main

import (
	"fmt"
	"slices"

	"github.com/spf13/cobra"

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
			db, tenant, err := c.tenant(cmd, tenantID)
			if err != nil {
				return err
			}
			var rows []models.TrackedEvent
			err = db.WithContext(cmd.Context()).Where("tenant_id = ?", tenant.ID).
				Order("created_at DESC, id DESC").Limit(limit).Find(&rows).Error
			if err != nil {
				return fmt.Errorf("list events: %w", err)
			}
			slices.Reverse(rows)
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
