package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/eventq/eventq/client"
	"github.com/eventq/eventq/internal/config"
)

func (c *cli) consumeCommand() *cobra.Command {
	var baseURL, token string
	var once, shared bool
	var batch int
	var visibility time.Duration
	cmd := &cobra.Command{
		Use:   "consume",
		Short: "Print a tenant's queued events as JSON lines, trimming each batch once it is written",
		Long: `consume reads the tenant's event queue through the platform API and prints every event
on stdout as one line of JSON, byte for byte as the API served it. A batch is trimmed from
the queue only after its lines are flushed to stdout, so delivery is at least once: if the
command dies between the two, the next run prints the batch again.

Without --once it runs until SIGINT or SIGTERM (exit 0): reads wait on the server for up to
20 s while the queue is empty (long polling; against a server without it, with back-off),
trims carry the read's offset so a retried trim removes nothing more, and transient errors
are retried. With --once it handles at most one batch: an empty queue prints nothing and
exits 0.

With --shared it leases its batches instead (POST /api/platform/events/leases), so that
any number of consume --shared processes can share the tenant's queue: each prints the
events it leased and acknowledges them once its lines are flushed. The leases are extended
while it writes; the events of a process that dies come back to the others after
--visibility, so every event is printed at least once, and exactly once while none dies.
Order holds within a batch, not across processes. On SIGINT or SIGTERM it hands the events
it has not printed back at once. --batch sets how many events it leases at a time.

--url and --token default to EVENTQ_URL and EVENTQ_TOKEN. The token needs the abilities
events:read and events:delete.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			baseURL = c.flagOrEnv(baseURL, "EVENTQ_URL")
			token = c.flagOrEnv(token, "EVENTQ_TOKEN")
			if baseURL == "" || token == "" {
				return fmt.Errorf("consume needs --url and --token (or EVENTQ_URL and EVENTQ_TOKEN)")
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			go func() { <-ctx.Done(); stop() }() // a second signal kills as usual
			out := bufio.NewWriterSize(c.out, 64<<10)
			log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))
			api := client.New(baseURL, token, client.WithLogger(log)) // retries show on stderr
			if !shared && (cmd.Flags().Changed("batch") || cmd.Flags().Changed("visibility")) {
				return fmt.Errorf("--batch and --visibility need --shared")
			}
			if shared {
				if once {
					return consumeSharedOnce(ctx, api, out, batch, visibility)
				}
				return consumeShared(ctx, api, out, batch, visibility)
			}
			if once {
				return consumeOnce(ctx, api, out)
			}
			return api.Consume(ctx, func(_ context.Context, b client.Batch) error {
				return writeBatch(out, b)
			})
		},
	}
	cmd.Flags().StringVar(&baseURL, "url", "", "base URL of the eventq api (default $EVENTQ_URL)")
	cmd.Flags().StringVar(&token, "token", "", "tenant token <id>|<secret> (default $EVENTQ_TOKEN)")
	cmd.Flags().BoolVar(&once, "once", false, "handle at most one batch, then exit")
	cmd.Flags().BoolVar(&shared, "shared", false, "lease batches, so that several consumers can share the queue")
	cmd.Flags().IntVar(&batch, "batch", client.DefaultLeaseLimit, "with --shared: events leased at a time (1-1000)")
	cmd.Flags().DurationVar(&visibility, "visibility", client.DefaultVisibility, "with --shared: how long a lease lasts (whole seconds)")
	return cmd
}

// consumeShared prints leased batches until ctx is cancelled, acknowledging each once its
// lines are flushed. A failed write stops it with that error; the batch is handed back.
func consumeShared(ctx context.Context, api *client.Client, out *bufio.Writer, batch int, visibility time.Duration) error {
	if batch < 1 || batch > client.MaxLeaseLimit {
		return fmt.Errorf("--batch must be 1 to %d, got %d", client.MaxLeaseLimit, batch)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var writeErr error
	err := api.ConsumeSharedBatch(ctx, func(_ context.Context, events []client.LeasedEvent) error {
		if err := writeEvents(out, leasedEvents(events)); err != nil {
			writeErr = err
			cancel()
			return err
		}
		return nil
	}, client.WithLeaseLimit(batch), client.WithVisibility(visibility))
	return errors.Join(writeErr, err)
}

// consumeSharedOnce leases one batch without waiting and, when it is not empty, prints and
// acknowledges it (bounded by client.FinalAckTimeout once the lines are out). A failed write
// hands the batch back.
func consumeSharedOnce(ctx context.Context, api *client.Client, out *bufio.Writer, batch int, visibility time.Duration) error {
	l, err := api.Lease(ctx, batch, visibility, 0)
	if ctx.Err() != nil {
		return nil
	}
	if err != nil || len(l.Events) == 0 {
		return err
	}
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), client.FinalAckTimeout)
	defer cancel()
	if err := writeEvents(out, leasedEvents(l.Events)); err != nil {
		ids := make([]string, len(l.Events))
		for i, e := range l.Events {
			ids[i] = e.LeaseID
		}
		_, rerr := api.Ack(tctx, client.AckRequest{Retries: ids})
		return errors.Join(err, rerr)
	}
	_, err = api.AckBatch(tctx, l)
	return err
}

func leasedEvents(leased []client.LeasedEvent) []client.Event {
	events := make([]client.Event, len(leased))
	for i, e := range leased {
		events[i] = e.Event
	}
	return events
}

// consumeOnce reads one batch and, when it is not empty, prints it and trims it. Errors are
// not retried: a script calls it again. An interruption before the read completes prints
// nothing and is not an error; once the lines are out, the trim is sent regardless (bounded by
// client.FinalTrimTimeout), as Consume does.
func consumeOnce(ctx context.Context, api *client.Client, out *bufio.Writer) error {
	b, err := api.Read(ctx)
	if ctx.Err() != nil {
		return nil
	}
	if err != nil || b.Count == 0 {
		return err
	}
	if err := writeBatch(out, b); err != nil {
		return err
	}
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), client.FinalTrimTimeout)
	defer cancel()
	if b.HasOffset {
		return api.TrimAt(tctx, b.Count, b.Offset)
	}
	return api.Trim(tctx, b.Count)
}

// writeBatch writes each event's served bytes as one line and flushes, so that every line has
// left the process before the caller trims.
func writeBatch(out *bufio.Writer, b client.Batch) error {
	return writeEvents(out, b.Events)
}

// writeEvents writes each event's served bytes as one line and flushes.
func writeEvents(out *bufio.Writer, events []client.Event) error {
	for _, e := range events {
		line := []byte(e.Raw)
		if bytes.ContainsAny(line, "\r\n") { // only insignificant whitespace can hold a newline
			var buf bytes.Buffer
			if err := json.Compact(&buf, line); err != nil {
				return fmt.Errorf("event %s: %w", e.ID, err)
			}
			line = buf.Bytes()
		}
		out.Write(line)
		out.WriteByte('\n')
	}
	if err := out.Flush(); err != nil {
		return fmt.Errorf("write events: %w", err)
	}
	return nil
}

// apiURL is where the CLI reaches the running api: APP_URL, or when only HTTP_ADDR is set,
// that address (a wildcard host means this machine), so that `make run` with another port
// needs no second variable.
func (c *cli) apiURL(cfg config.Config) string {
	if c.flagOrEnv("", "APP_URL") != "" {
		return cfg.AppURL
	}
	addr := c.flagOrEnv("", "HTTP_ADDR")
	if addr == "" {
		return cfg.AppURL
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return cfg.AppURL
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port)
}

// flagOrEnv returns v, or the environment variable name when v is empty.
func (c *cli) flagOrEnv(v, name string) string {
	if v != "" {
		return v
	}
	for _, kv := range c.environ { // the last assignment wins, as in config.Load
		if val, ok := strings.CutPrefix(kv, name+"="); ok {
			v = val
		}
	}
	return strings.TrimSpace(v)
}
