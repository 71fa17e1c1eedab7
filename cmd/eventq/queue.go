package main

import (
	"errors"

	"github.com/spf13/cobra"

	"github.com/eventq/eventq/internal/features"
)

func (c *cli) queueCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "queue", Short: "Look at a tenant's event queue"}
	var tenantID string
	stats := &cobra.Command{
		Use:   "stats",
		Short: "Print the queue's length and how many stored events wait to enter it",
		Long: `Prints {"tenant_id","length","offset","held_back","leased","dead_letters"}: the events in
the tenant's queue in Redis, the queue's front offset (how many events were ever trimmed), the
stored events not in the queue (held back while it is full, EVENTQUEUE_MAX_LENGTH, or waiting
for the worker after a failed append), the events under a live lease, and the dead letters.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			tenant, a, err := c.tenantApp(cmd, tenantID)
			if err != nil {
				return err
			}
			stats, err := a.Consume.Stats(cmd.Context(), tenant.ID)
			if err != nil {
				return err
			}
			return c.print(stats)
		},
	}
	stats.Flags().StringVar(&tenantID, "tenant", "", "tenant id (required)")
	cmd.AddCommand(stats, c.queueRebuildCommand())
	return cmd
}

// rebuildResult is the output of queue rebuild.
type rebuildResult struct {
	Tenants  int   `json:"tenants"`
	Restored int64 `json:"restored"`
}

func (c *cli) queueRebuildCommand() *cobra.Command {
	var tenantID string
	var all bool
	cmd := &cobra.Command{
		Use:   "rebuild (--tenant ID | --all)",
		Short: "Put a queue Redis lost back from the stored events",
		Long: `Replaces the tenant's queue (or the queue of every tenant with UseQueueEvents active) with
the stored events that had been queued and not trimmed, in order, and restores its front
offset. Run it after Redis lost the queues (a restart without persistence, a failover to a
replica that was behind, FLUSHALL). The last second of trims before the loss may not have
been recorded: those events come back. Prints {"tenants","restored"}.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if all == (tenantID != "") {
				return errors.New("give either --tenant ID or --all")
			}
			a, err := c.application()
			if err != nil {
				return err
			}
			var tenants []uint64
			if all {
				if tenants, err = a.Flags.ActiveTenants(cmd.Context(), features.UseQueueEvents); err != nil {
					return err
				}
			} else {
				tenant, err := c.tenant(cmd, tenantID)
				if err != nil {
					return err
				}
				tenants = []uint64{tenant.ID}
			}
			restored, err := a.Consume.Rebuild(cmd.Context(), tenants...)
			if err != nil {
				return err
			}
			out := rebuildResult{Tenants: len(tenants)}
			for _, n := range restored {
				out.Restored += n
			}
			return c.print(out)
		},
	}
	cmd.Flags().StringVar(&tenantID, "tenant", "", "tenant id")
	cmd.Flags().BoolVar(&all, "all", false, "every tenant with UseQueueEvents active")
	return cmd
}
