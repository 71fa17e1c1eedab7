package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/eventq/eventq/app"
	"github.com/eventq/eventq/internal/apperr"
	"github.com/eventq/eventq/internal/paginate"
	"github.com/eventq/eventq/internal/tenants"
	"github.com/eventq/eventq/internal/validate"
	"github.com/eventq/eventq/models"
)

// tenantJSON is what `tenant create` prints; update and rotate-site-key print the whole
// tenant (tenants.JSON), as the operator API does.
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
			a, err := c.application()
			if err != nil {
				return err
			}
			in := validate.Clean(map[string]any{"name": name})
			if account != "" {
				in["psp_account_id"] = account
			}
			t, err := a.Tenants.Create(cmd.Context(), in)
			if err != nil {
				return fmt.Errorf("create tenant: %w", flagErr(err, map[string]string{"psp_account_id": "--psp-account"}))
			}
			return c.print(tenantJSON{ID: models.FormatID(t.ID), Name: t.Name, SiteKey: t.SiteKey, PSPAccountID: t.PSPAccountID})
		},
	}
	create.Flags().StringVar(&name, "name", "", "tenant name (required)")
	create.Flags().StringVar(&account, "psp-account", "", "the tenant's connected account id at the payment provider (acct_…)")

	var id, hostnames, redact string
	update := &cobra.Command{
		Use:   "update",
		Short: "Change a tenant's allowed hostnames or redacted query parameters (api processes see it within a second)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			in := map[string]any{}
			if cmd.Flags().Changed("allowed-hostnames") {
				in["allowed_hostnames"] = list(hostnames)
			}
			if cmd.Flags().Changed("redact-query-params") {
				in["redact_query_params"] = list(redact)
			}
			if len(in) == 0 {
				return errors.New("give --allowed-hostnames or --redact-query-params (an empty value clears the list)")
			}
			return c.changeTenant(cmd, id, func(a *tenants.Service, n uint64) (*models.Tenant, error) {
				return a.Update(cmd.Context(), n, in)
			})
		},
	}
	update.Flags().StringVar(&id, "id", "", "tenant id (required)")
	update.Flags().StringVar(&hostnames, "allowed-hostnames", "", "comma list of the hostnames POST /api/track accepts pages of (subdomains included); empty: any")
	update.Flags().StringVar(&redact, "redact-query-params", "", "comma list of query parameters whose values are replaced by \"redacted\" at ingestion")

	rotate := &cobra.Command{
		Use:   "rotate-site-key",
		Short: "Give a tenant a new site key; the old one is refused within a second",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return c.changeTenant(cmd, id, func(a *tenants.Service, n uint64) (*models.Tenant, error) {
				return a.RotateSiteKey(cmd.Context(), n)
			})
		},
	}
	rotate.Flags().StringVar(&id, "id", "", "tenant id (required)")
	cmd.AddCommand(create, c.tenantListCommand(), update, rotate)
	return cmd
}

// changeTenant applies change to the tenant --id names and prints the tenant.
func (c *cli) changeTenant(cmd *cobra.Command, id string, change func(*tenants.Service, uint64) (*models.Tenant, error)) error {
	t, a, err := c.tenantApp(cmd, id)
	if err != nil {
		return err
	}
	if t, err = change(a.Tenants, t.ID); err != nil {
		return flagErr(err, nil)
	}
	v, err := a.Tenants.View(cmd.Context(), t)
	if err != nil {
		return err
	}
	return c.print(v)
}

// list splits a comma list into the []any a request body would hold.
func list(s string) []any {
	out := []any{}
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}

// flagErr renders a service's validation error for stderr, each message after the flag that
// gave the field (flags maps field to flag; by default --field with dashes).
func flagErr(err error, flags map[string]string) error {
	var ae *apperr.Error
	if !errors.As(err, &ae) || ae.Fields.Empty() {
		return err
	}
	var msgs []string
	for _, k := range ae.Fields.Keys() {
		field, _, _ := strings.Cut(k, ".")
		flag, ok := flags[field]
		if !ok {
			flag = "--" + strings.ReplaceAll(field, "_", "-")
		}
		msgs = append(msgs, flag+": "+strings.Join(ae.Fields.Messages(k), " "))
	}
	return errors.New(strings.Join(msgs, "; "))
}

// tenant loads the tenant named by a --tenant (or --id) flag value.
// tenantListCommand is `tenant list`: every tenant, in id order, as the operator API shows
// them (tenants.JSON), read a page at a time.
func (c *cli) tenantListCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List every tenant, in id order",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			a, err := c.application()
			if err != nil {
				return err
			}
			out := []tenants.JSON{}
			r := paginate.Request{PerPage: 100}
			for {
				page, err := a.Tenants.List(cmd.Context(), r)
				if err != nil {
					return fmt.Errorf("list tenants: %w", err)
				}
				out = append(out, page.Items...)
				if page.Next == nil {
					return c.print(out)
				}
				r.Cursor = page.Next
			}
		},
	}
}

// tenantApp is tenant, and the application it was read through, which the command goes on
// with.
func (c *cli) tenantApp(cmd *cobra.Command, id string) (*models.Tenant, *app.App, error) {
	t, err := c.tenant(cmd, id)
	if err != nil {
		return nil, nil, err
	}
	return t, c.app, nil
}

// tenant reads tenant id (the value of --tenant), through the application.
func (c *cli) tenant(cmd *cobra.Command, id string) (*models.Tenant, error) {
	n, ok := models.ParseID(id)
	if !ok {
		return nil, fmt.Errorf("--tenant must be a tenant id, got %q", id)
	}
	a, err := c.application()
	if err != nil {
		return nil, err
	}
	t, err := a.Tenants.Get(cmd.Context(), n)
	if errors.Is(err, apperr.ErrNotFound) {
		return nil, fmt.Errorf("tenant %s not found", id)
	}
	return t, err
}
