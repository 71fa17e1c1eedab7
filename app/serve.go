package app

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/eventq/eventq/internal/config"
	"github.com/eventq/eventq/internal/gctune"
	"github.com/eventq/eventq/internal/profiling"
)

// Process is a server process (the api, the worker) as Serve runs it.
type Process interface {
	// Open builds the application and whatever the process serves; on failure it closes
	// what it opened.
	Open() error
	// Run serves until ctx is done, then shuts down and closes everything.
	Run(ctx context.Context) error
	// Started is the message logged once Open succeeded ("api: listening") and its attributes.
	Started() (string, []any)
}

// Serve is the start-up every server process shares: JSON logs on stderr, the configuration
// from the environment (exit status 2 when it is invalid), the collector's settings (gctune),
// the profiler when PPROF_ADDR asks for it, SIGINT and SIGTERM for a graceful stop; then
// newProcess's Process opened and run. It returns the exit status: 0 after a clean stop, 1
// after a failure, each logged as "NAME: …".
func Serve(name string, newProcess func(config.Config, *slog.Logger) Process) int {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	cfg, err := config.Load(os.Environ())
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		return 2
	}
	gc := gctune.Apply(os.LookupEnv, os.ReadFile)    // GOGC and GOMEMLIMIT, unless the environment sets them
	prof, err := profiling.Start(cfg.PprofAddr, log) // off unless PPROF_ADDR is set
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: PPROF_ADDR: %v\n", name, err)
		return 1
	}
	defer prof.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	p := newProcess(cfg, log)
	if err := p.Open(); err != nil {
		log.Error(name+": start failed", "err", err)
		return 1
	}
	msg, attrs := p.Started()
	log.Info(msg, append(attrs, "gogc", gc.Percent, "gomemlimit", gc.MemoryLimit, "container_memory_limit", gc.ContainerLimit)...)
	if err := p.Run(ctx); err != nil {
		log.Error(name+": stopped with error", "err", err)
		return 1
	}
	log.Info(name + ": stopped")
	return 0
}
