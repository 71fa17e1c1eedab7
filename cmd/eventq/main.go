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
	"os"

	"github.com/spf13/cobra"
	"gorm.io/gorm"

	"github.com/eventq/eventq/internal/config"
	"github.com/eventq/eventq/internal/database"
	"github.com/eventq/eventq/internal/redisconn"
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Environ(), os.Stdout, os.Stderr))
}

// run executes one CLI invocation and returns the exit code.
func run(ctx context.Context, args, environ []string, stdout, stderr io.Writer) int {
	c := &cli{environ: environ, out: stdout}
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

// cli carries what the commands share; the database is opened on first use.
type cli struct {
	environ []string
	out     io.Writer
	cfg     *config.Config
	db      *gorm.DB
	conns   redisconn.Set
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

func (c *cli) database() (*gorm.DB, error) {
	if c.db != nil {
		return c.db, nil
	}
	cfg, err := c.config()
	if err != nil {
		return nil, err
	}
	c.db, err = database.Open(cfg.DatabaseURL)
	return c.db, err
}

// redis returns the named Redis connections, opened on first use and closed when the
// command ends.
func (c *cli) redis() (redisconn.Set, error) {
	if c.conns != nil {
		return c.conns, nil
	}
	cfg, err := c.config()
	if err != nil {
		return nil, err
	}
	c.conns, err = redisconn.Open(cfg.Redis)
	return c.conns, err
}

func (c *cli) close() {
	if c.db != nil {
		database.Close(c.db)
	}
	if c.conns != nil {
		c.conns.Close()
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
