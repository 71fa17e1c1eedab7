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
	"strings"

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
	return runAt(ctx, clock.Real{}, args, environ, stdout, stderr)
}

// runAt is run with clk as the time of the commands and of the application they open.
func runAt(ctx context.Context, clk clock.Clock, args, environ []string, stdout, stderr io.Writer) int {
	c := &cli{environ: environ, out: stdout, errOut: stderr, clock: clk}
	defer c.close()
	root := c.rootCommand()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	if err := root.ExecuteContext(ctx); err != nil {
		if msg := err.Error(); strings.HasPrefix(msg, "unknown command") && strings.HasSuffix(msg, `for "eventq"`) {
			err = fmt.Errorf("%s; run 'eventq --help' for its commands", msg) // cobra's own, for the root
		}
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
	clock   clock.Clock // what "now" is to every command and to the application they open
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
	refuseUnknown(root)
	return root
}

// refuseUnknown makes every group of commands under cmd (`tenant`, `token`, …) fail on a
// subcommand it does not have, naming it and pointing to --help, instead of cobra's default
// for a command that cannot run: its help, and exit status 0. Without arguments a group
// still prints its help.
func refuseUnknown(cmd *cobra.Command) {
	for _, sub := range cmd.Commands() {
		if sub.HasSubCommands() && sub.Run == nil && sub.RunE == nil {
			sub.Args = cobra.ArbitraryArgs
			sub.FParseErrWhitelist.UnknownFlags = true // the subcommand's flags: name the subcommand instead
			sub.RunE = func(cmd *cobra.Command, args []string) error {
				if len(args) == 0 {
					return cmd.Help()
				}
				return fmt.Errorf("unknown command %q for %q; run '%s --help' for its commands", args[0], cmd.CommandPath(), cmd.CommandPath())
			}
		}
		refuseUnknown(sub)
	}
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
	c.app, err = app.Open(cfg, slog.New(slog.NewTextHandler(c.errOut, nil)), c.clock)
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
			if nodes, err := database.NodesWithoutLogicalWAL(db); err != nil {
				fmt.Fprintf(cmd.ErrOrStderr(), "warning: could not read the Citus nodes' wal_level: %v\n", err)
			} else if len(nodes) > 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "warning: Citus nodes without wal_level = logical (%s): shards cannot be rebalanced onto a new node until it is set on every node and they restart (docs/scaling.md)\n", strings.Join(nodes, ", "))
			}
			return c.print(map[string]any{"migrated": true})
		},
	}
}
