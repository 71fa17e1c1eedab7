// Command eventq is the operator CLI: migrations, tenants, tokens, flags, members, products,
// a look at stored events, purchases and entitlements, a signed test webhook and
// reconciliation with the payment provider. Every
// command prints JSON on stdout and errors on stderr.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/spf13/cobra"
	"gorm.io/gorm"

	"github.com/eventq/eventq/app"
	"github.com/eventq/eventq/internal/clock"
	"github.com/eventq/eventq/internal/config"
	"github.com/eventq/eventq/internal/database"
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Environ(), os.Stdout, os.Stderr))
}

// run executes one CLI invocation and returns the exit code.
func run(ctx context.Context, args, environ []string, stdout, stderr io.Writer) int {
	c := &cli{environ: environ, out: stdout, errOut: stderr}
	defer c.close()
	root := c.rootCommand()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(stderr, "eventq:", err)
		return 1
	}
	return 0
}

// cli carries what the commands share; the application is opened on first use.
type cli struct {
	environ []string
	out     io.Writer
	errOut  io.Writer
	cfg     *config.Config
	app     *app.App
}

func (c *cli) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "eventq",
		Short:         "Operate an eventq installation",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(c.migrateCommand(), c.tenantCommand(), c.tokenCommand(), c.featureCommand(),
		c.memberCommand(), c.productCommand(), c.eventsCommand(), c.purchasesCommand(), c.entitlementsCommand(), c.webhookCommand(), c.consumeCommand(), c.queueCommand(), c.pspCommand())
	return root
}

func (c *cli) config() (config.Config, error) {
	if c.cfg == nil {
		cfg, err := config.Load(c.environ)
		if err != nil {
			return config.Config{}, err
		}
		c.cfg = &cfg
	}
	return *c.cfg, nil
}

// application returns the application (connections and services), opened on first use and
// closed when the command ends. Nothing connects to Redis until a command uses it. Its
// services log to stderr.
func (c *cli) application() (*app.App, error) {
	if c.app != nil {
		return c.app, nil
	}
	cfg, err := c.config()
	if err != nil {
		return nil, err
	}
	c.app, err = app.Open(cfg, slog.New(slog.NewTextHandler(c.errOut, nil)), clock.Real{})
	return c.app, err
}

// database returns the application's database.
func (c *cli) database() (*gorm.DB, error) {
	a, err := c.application()
	if err != nil {
		return nil, err
	}
	return a.DB, nil
}

func (c *cli) close() {
	if c.app != nil {
		c.app.Close()
	}
}

// print writes v as one line of JSON.
func (c *cli) print(v any) error {
	enc := json.NewEncoder(c.out)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

func (c *cli) migrateCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "migrate",
		Short: "Create or update the database schema (idempotent)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			db, err := c.database()
			if err != nil {
				return err
			}
			if err := database.Migrate(db); err != nil {
				return err
			}
			return c.print(map[string]any{"migrated": true})
		},
	}
}
