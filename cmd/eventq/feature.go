package main

import (
	"github.com/spf13/cobra"

	"github.com/eventq/eventq/internal/features"
	"github.com/eventq/eventq/models"
)

func (c *cli) featureCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "feature", Short: "Switch per-tenant feature flags"}
	for _, active := range []bool{true, false} {
		use, short := "deactivate", "Turn a feature off for a tenant"
		if active {
			use, short = "activate", "Turn a feature on for a tenant; API processes see it within 5 seconds"
		}
		var tenantID string
		sub := &cobra.Command{
			Use:       use + " FEATURE",
			Short:     short,
			Args:      cobra.ExactArgs(1),
			ValidArgs: features.Known,
			RunE: func(cmd *cobra.Command, args []string) error {
				_, tenant, err := c.tenant(cmd, tenantID)
				if err != nil {
					return err
				}
				a, err := c.application()
				if err != nil {
					return err
				}
				if err := a.Flags.Set(cmd.Context(), args[0], tenant.ID, active); err != nil {
					return err
				}
				return c.print(struct {
					Feature  string `json:"feature"`
					TenantID string `json:"tenant_id"`
					Active   bool   `json:"active"`
				}{args[0], models.FormatID(tenant.ID), active})
			},
		}
		sub.Flags().StringVar(&tenantID, "tenant", "", "tenant id (required)")
		cmd.AddCommand(sub)
	}
	return cmd
}
