// Command queen is the Queen broker: `queen serve` runs a broker, `queen
// migrate` applies the schema, `queen push` pushes from the command line,
// and `queen queues|tail|dedup|dlq|cluster` are the operator's verbs.
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

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/cmd/queen/internal/broker"
	"github.com/queen-mq/queen-go/logs"
)

// stopSignals restores the default handling of SIGINT and SIGTERM: after the
// first signal starts a drain, a second one ends the process at once.
var stopSignals = func() {}

// version is the release: `queen --version` prints it, and the broker
// reports it (the NATS micro service, /health, the cluster view).
var version = broker.Release

func main() {
	// The push path allocates per item and the heap stays small (tens of MB);
	// a lazier collector buys throughput for little memory. Not lazier than
	// 200: the heap's goal is (1 + GOGC/100) times the live heap, so every MB
	// the live heap drifts by shows as that many MB of RSS (at 400, a
	// 30-minute soak's RSS rose 1.13x on an 11 MB drift). GOGC still wins.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(200)
	}
	// ...but the heap must not grow five-fold under large bodies: past a
	// soft limit the collector runs as often as needed. GOMEMLIMIT wins;
	// serve sets it to its cache and partition budgets plus headroom
	// (serveMemoryLimit).
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(2 << 30)
	}
	slog.SetDefault(slog.New(logs.RateLimit(slog.NewTextHandler(os.Stderr, nil), logs.RateLimitConfig{})))
	startProfiling()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	stopSignals = stop
	if err := rootCmd().ExecuteContext(ctx); err != nil {
		// The operator verbs' exit codes (operator.go); 1 otherwise. A
		// codeError without a message (queen dedup's 3 and 4) prints nothing.
		if msg := err.Error(); msg != "" {
			fmt.Fprintln(os.Stderr, "queen:", msg)
		}
		os.Exit(exitCode(err))
	}
}

// rootCmd is the queen command with every verb.
func rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "queen",
		Short:         "Queen: a partitioned message queue on PostgreSQL with idempotent producers",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       versionText(broker.BuildOf(version)),
	}
	root.SetVersionTemplate("queen {{.Version}}\n")
	root.AddCommand(serveCmd(), migrateCmd(), pushCmd(), loadtestCmd(),
		queuesCmd(), tailCmd(), dedupCmd(), dlqCmd(), clusterCmd(), whoamiCmd(), natsNodeCmd())
	return root
}

// versionText is what `queen --version` prints after "queen ": the release,
// the VCS revision ("unknown" when the build recorded none, "+dirty" with
// local changes), the schema version (the newest migration this binary
// applies; it refuses a database holding newer ones) and the storage layout
// generation, e.g. "0.2.0 (revision 58a347c...+dirty, schema 15, layout 0)".
func versionText(b queen.Build) string {
	return fmt.Sprintf("%s (revision %s, schema %d, layout %d)", b.Release, b.Revision, b.Schema, b.Layout)
}

// serveHeadroom is the memory a broker's Go heap needs beside its dedup
// cache and its partition actors: the push path's working set, connection
// buffers and the runtime. With the binary's mapped code (about 30 MB of RSS,
// outside the Go limit) a broker whose heap reaches the limit stays within
// the cache budget + the partition budget + 200 MB of RSS.
const serveHeadroom = 160 << 20

// serveMemoryLimit sets the Go soft memory limit of `queen serve` (and of
// `loadtest --embedded`) to the dedup cache's budget (SPEC.md §8: the budget
// bounds the memory the process really spends on the cache) plus the
// partition actors' budget (QUEEN_PARTITION_MEMORY_MB, MiB; 0, no bound,
// adds nothing) plus serveHeadroom, unless GOMEMLIMIT is set. Counting the
// actors keeps a broker that holds as many as its bound allows from running
// its collector against a limit sized for the cache alone. The cache holds
// pointer-free filters, so a heap near the limit costs the collector little;
// GOGC 200 still spaces collections while the heap is small.
func serveMemoryLimit(cacheBudget int64, partitionMB int) {
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(cacheBudget + int64(partitionMB)<<20 + serveHeadroom)
	}
}
