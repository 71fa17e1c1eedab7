package main

import (
	"fmt"
	"net/mail"
	"regexp"
	"strings"

	"github.com/spf13/cobra"

	"github.com/eventq/eventq/models"
)

var currencyRe = regexp.MustCompile(`^[a-z]{3}$`)

func (c *cli) memberCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "member", Short: "Manage audience members"}
	var tenantID, email, name string
	create := &cobra.Command{
		Use:   "create",
		Short: "Create an audience member of a tenant",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			addr, err := mail.ParseAddress(email)
			if err != nil || addr.Address != strings.TrimSpace(email) {
				return fmt.Errorf("--email: %q is not an e-mail address", email)
			}
			db, tenant, err := c.tenant(cmd, tenantID)
			if err != nil {
				return err
			}
			m := models.AudienceMember{TenantID: tenant.ID, Email: addr.Address, Name: name}
			if err := db.WithContext(cmd.Context()).Create(&m).Error; err != nil {
				return fmt.Errorf("create member: %w", err)
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
	cmd.AddCommand(create)
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
			currency = strings.ToLower(strings.TrimSpace(currency))
			switch {
			case strings.TrimSpace(name) == "":
				return fmt.Errorf("--name is required")
			case !cmd.Flags().Changed("amount"):
				return fmt.Errorf("--amount is required")
			case amount < 0:
				return fmt.Errorf("--amount must be zero or more minor units, got %d", amount)
			case !currencyRe.MatchString(currency):
				return fmt.Errorf("--currency must be a three-letter ISO code such as usd, got %q", currency)
			}
			db, tenant, err := c.tenant(cmd, tenantID)
			if err != nil {
				return err
			}
			p := models.Product{TenantID: tenant.ID, Name: strings.TrimSpace(name), Amount: amount, Currency: currency}
			if err := db.WithContext(cmd.Context()).Create(&p).Error; err != nil {
				return fmt.Errorf("create product: %w", err)
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
