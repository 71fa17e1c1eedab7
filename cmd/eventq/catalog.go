package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/eventq/eventq/internal/erasure"
	"github.com/eventq/eventq/internal/validate"
	"github.com/eventq/eventq/models"
)

func (c *cli) memberCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "member", Short: "Manage audience members"}
	var tenantID, email, name, external string
	create := &cobra.Command{
		Use:   "create",
		Short: "Create an audience member of a tenant",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			tenant, a, err := c.tenantApp(cmd, tenantID)
			if err != nil {
				return err
			}
			in := validate.Clean(map[string]any{"email": email, "name": name, "external_id": external})
			m, err := a.Members.Create(cmd.Context(), tenant.ID, in)
			if err != nil {
				return fmt.Errorf("create member: %w", flagErr(err, nil))
			}
			return c.print(struct {
				ID    string `json:"id"`
				Email string `json:"email"`
			}{models.FormatID(m.ID), m.Email})
		},
	}
	create.Flags().StringVar(&tenantID, "tenant", "", "tenant id (required)")
	create.Flags().StringVar(&email, "email", "", "e-mail address (required)")
	create.Flags().StringVar(&name, "name", "", "display name")
	create.Flags().StringVar(&external, "external-id", "", "the tenant's own id of the member (unique within the tenant)")

	var ref string
	erase := &cobra.Command{
		Use:   "erase",
		Short: "Erase a member: blank its personal fields, delete its events and those of its sessions, redact their copies in Redis; prints the erasure once done",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			tenant, a, err := c.tenantApp(cmd, tenantID)
			if err != nil {
				return err
			}
			m, err := a.Members.Get(cmd.Context(), tenant.ID, ref)
			if err != nil {
				return rowErr(err, "member", ref, tenant.ID)
			}
			e, err := a.Erasures.Request(cmd.Context(), m)
			if err != nil {
				return err
			}
			// Carried out here, as a worker would (a worker beside does no harm), and waited for.
			if err := a.Erasures.Run(cmd.Context(), e.TenantID, e.ID); err != nil {
				return err
			}
			if e, err = a.Erasures.Get(cmd.Context(), tenant.ID, e.ID); err != nil {
				return err
			}
			return c.print(erasure.View(e))
		},
	}
	erase.Flags().StringVar(&tenantID, "tenant", "", "tenant id (required)")
	erase.Flags().StringVar(&ref, "member", "", "the member's id, or external: and its external id (required)")
	cmd.AddCommand(create, erase)
	return cmd
}

func (c *cli) productCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "product", Short: "Manage products"}
	var tenantID, name, currency string
	var amount int64
	create := &cobra.Command{
		Use:   "create",
		Short: "Create a product priced in minor units (cents)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			tenant, a, err := c.tenantApp(cmd, tenantID)
			if err != nil {
				return err
			}
			in := validate.Clean(map[string]any{"name": name, "currency": strings.ToLower(currency)})
			if cmd.Flags().Changed("amount") {
				in["amount"] = fmt.Sprint(amount)
			}
			p, err := a.Products.Create(cmd.Context(), tenant.ID, in)
			if err != nil {
				return fmt.Errorf("create product: %w", flagErr(err, nil))
			}
			return c.print(struct {
				ID       string `json:"id"`
				Name     string `json:"name"`
				Amount   int64  `json:"amount"`
				Currency string `json:"currency"`
			}{models.FormatID(p.ID), p.Name, p.Amount, p.Currency})
		},
	}
	create.Flags().StringVar(&tenantID, "tenant", "", "tenant id (required)")
	create.Flags().StringVar(&name, "name", "", "product name (required)")
	create.Flags().Int64Var(&amount, "amount", -1, "price in minor units, e.g. 1999 for 19.99 (required)")
	create.Flags().StringVar(&currency, "currency", "", "ISO currency code, e.g. usd (required)")
	cmd.AddCommand(create)
	return cmd
}
