package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/eventq/eventq/internal/apperr"
	"github.com/eventq/eventq/internal/features"
)

func (c *cli) featureCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "feature", Short: "Switch per-tenant feature flags"}
	for _, active := range []bool{true, false} {
		use, short := "deactivate", "Turn a feature off for a tenant"
		if active {
			use, short = "activate", "Turn a feature on for a tenant; API processes see it within a second"
		}
		var tenantID string
		sub := &cobra.Command{
			Use:       use + " FEATURE",
			Short:     short,
			Args:      cobra.ExactArgs(1),
			ValidArgs: features.Known,
			RunE: func(cmd *cobra.Command, args []string) error {
				tenant, a, err := c.tenantApp(cmd, tenantID)
				if err != nil {
					return err
				}
				out, err := a.Tenants.SetFeature(cmd.Context(), tenant.ID, args[0], active)
				if errors.Is(err, apperr.ErrNotFound) {
					return fmt.Errorf("unknown feature %q (known: %s)", args[0], strings.Join(features.Known, ", "))
				}
				if err != nil {
					return err
				}
				return c.print(out)
			},
		}
		sub.Flags().StringVar(&tenantID, "tenant", "", "tenant id (required)")
		cmd.AddCommand(sub)
	}
	return cmd
}
