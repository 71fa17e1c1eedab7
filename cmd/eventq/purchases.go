package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/eventq/eventq/models"
)

// purchaseJSON is one line of `purchases list`; the field order is the contract's key order.
type purchaseJSON struct {
	ID                   string `json:"id"`
	AudienceMemberID     string `json:"audience_member_id"`
	ProductID            string `json:"product_id"`
	PSPCheckoutSessionID string `json:"psp_checkout_session_id"`
	AmountTotal          int64  `json:"amount_total"`
	Currency             string `json:"currency"`
	CreatedAt            string `json:"created_at"`
	Status               string `json:"status"`
}

// entitlementJSON is one line of `entitlements list`.
type entitlementJSON struct {
	ID               string `json:"id"`
	AudienceMemberID string `json:"audience_member_id"`
	ProductID        string `json:"product_id"`
	PurchaseID       string `json:"purchase_id"`
}

func (c *cli) purchasesCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "purchases", Short: "Look at fulfilled purchases"}
	var tenantID string
	list := &cobra.Command{
		Use:   "list",
		Short: "Print a tenant's purchases, oldest first, with their status (paid, refunded or disputed)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			tenant, a, err := c.tenantApp(cmd, tenantID)
			if err != nil {
				return err
			}
			rows, err := a.Purchases.Purchases(cmd.Context(), tenant.ID, 0)
			if err != nil {
				return fmt.Errorf("list purchases: %w", err)
			}
			out := make([]purchaseJSON, len(rows))
			for i, p := range rows {
				out[i] = purchaseJSON{
					ID:                   models.FormatID(p.ID),
					AudienceMemberID:     models.FormatID(p.AudienceMemberID),
					ProductID:            models.FormatID(p.ProductID),
					PSPCheckoutSessionID: p.PSPCheckoutSessionID,
					AmountTotal:          p.AmountTotal,
					Currency:             p.Currency,
					CreatedAt:            p.CreatedAt.UTC().Format(models.TimeFormat),
					Status:               p.Status,
				}
			}
			return c.print(out)
		},
	}
	list.Flags().StringVar(&tenantID, "tenant", "", "tenant id (required)")
	cmd.AddCommand(list)
	return cmd
}

func (c *cli) entitlementsCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "entitlements", Short: "Look at granted entitlements"}
	var tenantID, memberID string
	list := &cobra.Command{
		Use:   "list",
		Short: "Print a tenant's entitlements in force (not revoked by a refund or dispute), optionally of one member, ordered by id",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var member uint64
			if cmd.Flags().Changed("member") {
				var ok bool
				if member, ok = models.ParseID(memberID); !ok {
					return fmt.Errorf("--member must be an audience member id, got %q", memberID)
				}
			}
			tenant, a, err := c.tenantApp(cmd, tenantID)
			if err != nil {
				return err
			}
			rows, err := a.Purchases.Entitlements(cmd.Context(), tenant.ID, member)
			if err != nil {
				return fmt.Errorf("list entitlements: %w", err)
			}
			out := make([]entitlementJSON, len(rows))
			for i, e := range rows {
				out[i] = entitlementJSON{
					ID:               models.FormatID(e.ID),
					AudienceMemberID: models.FormatID(e.AudienceMemberID),
					ProductID:        models.FormatID(e.ProductID),
					PurchaseID:       models.FormatID(e.PurchaseID),
				}
			}
			return c.print(out)
		},
	}
	list.Flags().StringVar(&tenantID, "tenant", "", "tenant id (required)")
	list.Flags().StringVar(&memberID, "member", "", "only this audience member's entitlements")
	cmd.AddCommand(list)
	return cmd
}
