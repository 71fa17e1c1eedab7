package main

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/eventq/eventq/internal/auth"
	"github.com/eventq/eventq/models"
)

func (c *cli) tokenCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "token", Short: "Manage API tokens (Sanctum personal access tokens)"}

	var tenantID, name, abilities, expiresIn string
	create := &cobra.Command{
		Use:   "create",
		Short: "Issue a token for a tenant; the token is printed once",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			abl, err := parseAbilities(abilities)
			if err != nil {
				return err
			}
			var expires *time.Time
			if expiresIn != "" {
				d, err := parseDuration(expiresIn)
				if err != nil {
					return err
				}
				t := c.clock.Now().UTC().Add(d)
				expires = &t
			}
			tenant, a, err := c.tenantApp(cmd, tenantID)
			if err != nil {
				return err
			}
			row, plain, err := a.Tokens.Create(cmd.Context(), tenant.ID, auth.TokenInput{Name: name, Abilities: abl, ExpiresAt: expires})
			if err != nil {
				return err
			}
			return c.print(struct {
				ID    string `json:"id"`
				Token string `json:"token"`
			}{models.FormatID(row.ID), plain})
		},
	}
	create.Flags().StringVar(&tenantID, "tenant", "", "tenant id (required)")
	create.Flags().StringVar(&name, "name", "api", "token name")
	create.Flags().StringVar(&abilities, "abilities", "*", "comma list of: "+strings.Join(auth.KnownAbilities, ", "))
	create.Flags().StringVar(&expiresIn, "expires-in", "", "lifetime, e.g. 90m, 24h or 30d (default: never expires)")

	var id string
	revoke := &cobra.Command{
		Use:   "revoke",
		Short: "Revoke a token; every API process refuses it within 4 seconds",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			n, ok := models.ParseID(id)
			if !ok {
				return fmt.Errorf("--id must be a token id, got %q", id)
			}
			a, err := c.application()
			if err != nil {
				return err
			}
			if err := a.Tokens.Revoke(cmd.Context(), n); err != nil {
				if errors.Is(err, auth.ErrTokenNotFound) {
					return fmt.Errorf("token %d not found", n)
				}
				return err
			}
			return c.print(struct {
				ID      string `json:"id"`
				Revoked bool   `json:"revoked"`
			}{models.FormatID(n), true})
		},
	}
	revoke.Flags().StringVar(&id, "id", "", "token id (required)")

	var listTenant string
	list := &cobra.Command{
		Use:   "list",
		Short: "List a tenant's tokens (never their secrets)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			tenant, a, err := c.tenantApp(cmd, listTenant)
			if err != nil {
				return err
			}
			rows, err := a.Tokens.List(cmd.Context(), tenant.ID)
			if err != nil {
				return fmt.Errorf("list tokens: %w", err)
			}
			out := make([]auth.TokenJSON, len(rows))
			for i := range rows {
				out[i] = auth.ViewToken(&rows[i])
			}
			return c.print(out)
		},
	}
	list.Flags().StringVar(&listTenant, "tenant", "", "tenant id (required)")
	cmd.AddCommand(create, list, revoke)
	return cmd
}

func parseAbilities(s string) ([]string, error) {
	var out []string
	for _, a := range strings.Split(s, ",") {
		if a = strings.TrimSpace(a); a == "" {
			continue
		}
		if !slices.Contains(auth.KnownAbilities, a) {
			return nil, fmt.Errorf("--abilities: unknown ability %q (known: %s)", a, strings.Join(auth.KnownAbilities, ", "))
		}
		out = append(out, a)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--abilities: give at least one ability")
	}
	return out, nil
}

// parseDuration accepts Go durations and a whole number of days ("30d").
func parseDuration(s string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		if n, err := strconv.Atoi(days); err == nil && n > 0 {
			return time.Duration(n) * 24 * time.Hour, nil
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("--expires-in: %q is not a positive duration such as 90m, 24h or 30d", s)
	}
	return d, nil
}
