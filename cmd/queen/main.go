// Command queen is the Queen broker: `queen serve` runs a broker, `queen
// migrate` applies the schema, `queen push` pushes from the command line.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/spf13/cobra"
)

// stopSignals restores the default handling of SIGINT and SIGTERM: after the
// first signal starts a drain, a second one ends the process at once.
var stopSignals = func() {}

// version is the broker's version, reported by the NATS micro service.
var version = "0.1.0"

func main() {
	// The push path allocates per item and the heap stays small (tens of MB);
	// a lazier collector buys throughput for little memory. GOGC still wins.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
	// ...but the heap must not grow five-fold under large bodies: past a
	// soft limit the collector runs as often as needed. GOMEMLIMIT wins.
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(2 << 30)
	}
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, nil)))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	stopSignals = stop
	root := &cobra.Command{
		Use:           "queen",
		Short:         "Queen: a partitioned message queue on PostgreSQL with idempotent producers",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version,
	}
	root.AddCommand(serveCmd(), migrateCmd(), pushCmd(), loadtestCmd())
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "queen:", err)
		os.Exit(1)
	}
}
