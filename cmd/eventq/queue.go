package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/eventq/eventq/internal/eventqueue"
	"github.com/eventq/eventq/internal/redisconn"
	"github.com/eventq/eventq/models"
)

// queueStats is the output of queue stats.
type queueStats struct {
	TenantID string `json:"tenant_id"`
	Length   int64  `json:"length"`
	Offset   int64  `json:"offset"`
	HeldBack int64  `json:"held_back"`
}

func (c *cli) queueCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "queue", Short: "Look at a tenant's event queue"}
	var tenantID string
	stats := &cobra.Command{
		Use:   "stats",
		Short: "Print the queue's length and how many stored events wait to enter it",
		Long: `Prints {"tenant_id","length","offset","held_back"}: the events in the tenant's queue in
Redis, the queue's front offset (0: offsets are not kept yet), and the stored events not yet
in the queue: held back while it is full (EVENTQUEUE_MAX_LENGTH), or waiting for the worker
after a failed append.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			db, tenant, err := c.tenant(cmd, tenantID)
			if err != nil {
				return err
			}
			cfg, err := c.config()
			if err != nil {
				return err
			}
			conns, err := redisconn.Open(cfg.Redis)
			if err != nil {
				return err
			}
			defer conns.Close()
			store := eventqueue.New(conns[cfg.QueueConnection])
			defer store.Close()
			out := queueStats{TenantID: models.FormatID(tenant.ID)}
			if out.Length, err = store.Len(cmd.Context(), tenant.ID); err != nil {
				return err
			}
			err = db.WithContext(cmd.Context()).Model(&models.TrackedEvent{}).
				Where("tenant_id = ? AND queue_pending = ?", tenant.ID, true).Count(&out.HeldBack).Error
			if err != nil {
				return fmt.Errorf("count held back events: %w", err)
			}
			return c.print(out)
		},
	}
	stats.Flags().StringVar(&tenantID, "tenant", "", "tenant id (required)")
	cmd.AddCommand(stats)
	return cmd
}
