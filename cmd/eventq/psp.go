package main

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/spf13/cobra"

	"github.com/eventq/eventq/internal/payments"
	"github.com/eventq/eventq/models"
)

func (c *cli) pspCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "psp", Short: "Work with the payment provider"}
	var (
		since    time.Duration
		tenantID string
	)
	reconcile := &cobra.Command{
		Use:   "reconcile",
		Short: "Queue the provider events of the last --since whose delivery never came",
		Long: "Lists the provider's checkout, refund and dispute events created within --since, on the\n" +
			"platform and on every tenant's connected account (or only --tenant's), and queues each one\n" +
			"eventq has not processed for the worker, exactly as a webhook delivery would. Running it\n" +
			"again, or while deliveries arrive, changes nothing more. Prints how many events were\n" +
			"checked and how many were queued.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if since <= 0 {
				return fmt.Errorf("--since must be a positive duration, got %s", since)
			}
			var tenant uint64
			if cmd.Flags().Changed("tenant") {
				var ok bool
				if tenant, ok = models.ParseID(tenantID); !ok {
					return fmt.Errorf("--tenant must be a tenant id, got %q", tenantID)
				}
			}
			cfg, err := c.config()
			if err != nil {
				return err
			}
			if cfg.PSP.SecretKey == "" {
				return errors.New("no provider key: set PSP_SECRET_KEY (or STRIPE_SECRET_KEY); reconciliation reads the provider's event list, which make run has no key for")
			}
			a, err := c.application()
			if err != nil {
				return err
			}
			r := *a.Reconciler                    // set, as there is a provider key
			r.Log = slog.New(slog.DiscardHandler) // the command prints the outcome itself
			res, err := r.Run(cmd.Context(), payments.ReconcileOptions{Since: c.clock.Now().Add(-since), TenantID: tenant})
			if err != nil {
				return fmt.Errorf("%w (checked %d, queued %d before the failure)", err, res.Checked, res.Enqueued)
			}
			return c.print(res)
		},
	}
	reconcile.Flags().DurationVar(&since, "since", payments.DefaultReconcileSince, "how far back to look (the provider keeps events for 30 days)")
	reconcile.Flags().StringVar(&tenantID, "tenant", "", "only this tenant's account and checkouts")
	cmd.AddCommand(reconcile)
	return cmd
}
