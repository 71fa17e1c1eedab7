package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"gorm.io/gorm"

	"github.com/eventq/eventq/models"
)

type tenantJSON struct {
	ID           string  `json:"id"`
	Name         string  `json:"name"`
	SiteKey      string  `json:"site_key"`
	PSPAccountID *string `json:"psp_account_id"`
}

func (c *cli) tenantCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "tenant", Short: "Manage tenants"}
	var name, account string
	create := &cobra.Command{
		Use:   "create",
		Short: "Create a tenant and its public site key",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if strings.TrimSpace(name) == "" {
				return errors.New("--name is required")
			}
			if account != "" && !strings.HasPrefix(account, "acct_") {
				return fmt.Errorf("--psp-account must look like acct_…, got %q", account)
			}
			db, err := c.database()
			if err != nil {
				return err
			}
			key := make([]byte, 16)
			if _, err := rand.Read(key); err != nil {
				return err
			}
			t := models.Tenant{Name: strings.TrimSpace(name), SiteKey: "site_" + hex.EncodeToString(key)}
			if account != "" {
				t.PSPAccountID = &account
			}
			if err := db.WithContext(cmd.Context()).Create(&t).Error; err != nil {
				return fmt.Errorf("create tenant: %w", err)
			}
			return c.print(tenantJSON{ID: models.FormatID(t.ID), Name: t.Name, SiteKey: t.SiteKey, PSPAccountID: t.PSPAccountID})
		},
	}
	create.Flags().StringVar(&name, "name", "", "tenant name (required)")
	create.Flags().StringVar(&account, "psp-account", "", "the tenant's connected account id at the payment provider (acct_…)")
	cmd.AddCommand(create)
	return cmd
}

// tenant loads the tenant named by a --tenant flag value.
func (c *cli) tenant(cmd *cobra.Command, id string) (*gorm.DB, *models.Tenant, error) {
	n, ok := models.ParseID(id)
	if !ok {
		return nil, nil, fmt.Errorf("--tenant must be a tenant id, got %q", id)
	}
	db, err := c.database()
	if err != nil {
		return nil, nil, err
	}
	var t models.Tenant
	err = db.WithContext(cmd.Context()).Take(&t, n).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return nil, nil, fmt.Errorf("tenant %s not found", id)
	}
	if err != nil {
		return nil, nil, err
	}
	return db, &t, nil
}
