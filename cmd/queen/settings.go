package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/cmd/queen/internal/broker"
	"github.com/queen-mq/queen-go/logs"
	"github.com/queen-mq/queen-go/persistence"
	"github.com/queen-mq/queen-go/shards"
)

// envOr returns the environment variable's value, or def when unset or empty.
func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// envInt applies the environment variable name, a whole number, over *dst
// where the flag named flag was not given (cmd nil: the environment alone).
// Unset or empty leaves *dst; a malformed value is an error naming the
// variable, so the start is refused rather than the default silently kept.
func envInt(cmd *cobra.Command, flag, name string, dst *int) error {
	v := os.Getenv(name)
	if v == "" || (cmd != nil && cmd.Flags().Changed(flag)) {
		return nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return fmt.Errorf("%s=%q is not a whole number", name, v)
	}
	*dst = n
	return nil
}

// databaseURLFromEnv returns DATABASE_URL, else a URL built from PG_HOST,
// PG_PORT, PG_USER, PG_PASSWORD and PG_DB when PG_HOST is set, else "" (use
// the managed PostgreSQL).
func databaseURLFromEnv() string {
	if v := os.Getenv("DATABASE_URL"); v != "" {
		return v
	}
	host := os.Getenv("PG_HOST")
	if host == "" {
		return ""
	}
	u := &url.URL{Scheme: "postgres", Host: host + ":" + envOr("PG_PORT", "5432"), Path: "/" + envOr("PG_DB", "postgres")}
	user := envOr("PG_USER", "postgres")
	if pw, ok := os.LookupEnv("PG_PASSWORD"); ok {
		u.User = url.UserPassword(user, pw)
	} else {
		u.User = url.User(user)
	}
	return u.String()
}

// dbFlags are the database settings shared by serve, migrate and push.
type dbFlags struct {
	databaseURL string
	dataDir     string
	pgBin       string
}

func (f *dbFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.databaseURL, "database-url", databaseURLFromEnv(), "external PostgreSQL URL (env DATABASE_URL, or PG_HOST/PG_PORT/PG_USER/PG_PASSWORD/PG_DB); empty = managed local PostgreSQL in the data dir")
	cmd.Flags().StringVar(&f.dataDir, "data-dir", envOr("QUEEN_DATA_DIR", ".queen"), "data folder for the managed PostgreSQL and postgres.url (env QUEEN_DATA_DIR)")
	cmd.Flags().StringVar(&f.pgBin, "pg-bin", os.Getenv("QUEEN_PG_BIN"), "folder of the PostgreSQL binaries for the managed database (env QUEEN_PG_BIN; default pg_config --bindir, then /usr/lib/postgresql/*/bin)")
}

// runningURL returns the URL of a managed PostgreSQL that a running broker
// wrote to <data-dir>/postgres.url, or "".
func (f *dbFlags) runningURL() string {
	b, err := os.ReadFile(filepath.Join(f.dataDir, "postgres.url"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// newLogger is the broker's logger at level: text on stderr, warnings and
// errors of one kind (level and message) written at most once a second with
// the count of those left out ("suppressed=N", logs.RateLimit), so an
// outage does not flood the log.
func newLogger(level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("bad log level %q: %w", level, err)
	}
	return slog.New(logs.RateLimit(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l}), logs.RateLimitConfig{})), nil
}

// flushLog writes the counts of repeated records log's handler left out
// (logs.RateLimit), at exit.
func flushLog(log *slog.Logger) {
	if h, ok := log.Handler().(*logs.Handler); ok {
		h.Flush(context.Background())
	}
}

func serveCmd() *cobra.Command {
	var cfg broker.Config
	var db dbFlags
	var logLevel, dedupCache string
	var jwt jwtFlags
	var sec securityFlags
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run a broker (embedded NATS and managed PostgreSQL unless NATS_URL / DATABASE_URL are set)",
		Long: `Run a broker. With no settings it starts an embedded NATS server on 127.0.0.1:4222,
a managed local PostgreSQL in ./.queen (initdb on first start, reused after), and the
HTTP gateway on 127.0.0.1:6632. SIGINT/SIGTERM drain in-flight pushes, then stop.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := envInt(cmd, "max-payload-bytes", "QUEEN_MAX_PAYLOAD_BYTES", &cfg.MaxPayloadBytes); err != nil {
				return err
			}
			if err := envInt(cmd, "dedup-cache-mb", "QUEEN_DEDUP_CACHE_MB", &cfg.DedupCacheMB); err != nil {
				return err
			}
			if err := dedupCacheSettings(&cfg, dedupCache); err != nil {
				return err
			}
			if err := retentionSettings(cmd, &cfg.Retention); err != nil {
				return err
			}
			if err := sidecarSettings(cmd, &cfg.SidecarRange); err != nil {
				return err
			}
			if err := lockSettings(cmd, &cfg.LockTimeout); err != nil {
				return err
			}
			if err := clusterSettings(cmd, &cfg); err != nil {
				return err
			}
			if err := partitionIdleSettings(cmd, &cfg.PartitionIdle); err != nil {
				return err
			}
			if err := partitionMemorySettings(cmd, &cfg.PartitionMemoryMB); err != nil {
				return err
			}
			serveMemoryLimit(int64(cfg.DedupCacheMB)<<20, cfg.PartitionMemoryMB)
			if cfg.MaxPayloadBytes <= 0 || cfg.MaxPayloadBytes > 16<<20 {
				return fmt.Errorf("--max-payload-bytes %d: want 1 to %d (the 16 MiB body limit)", cfg.MaxPayloadBytes, 16<<20)
			}
			log, err := newLogger(logLevel)
			if err != nil {
				return err
			}
			cfg.Logger = log
			defer flushLog(log)
			cfg.DatabaseURL, cfg.DataDir, cfg.PGBin = db.databaseURL, db.dataDir, db.pgBin
			cfg.Version = version
			cfg.AdminToken = os.Getenv("QUEEN_ADMIN_TOKEN")
			if cfg.JWT, err = jwt.settings(cmd); err != nil {
				return err
			}
			sec.apply(&cfg)
			ctx := cmd.Context()
			b, err := broker.Start(ctx, cfg)
			if err != nil {
				return err
			}
			hupCtx, hupStop := context.WithCancel(ctx)
			defer hupStop()
			reloadOnHangup(hupCtx, b, log, cfg.TLSCertFile != "", cfg.NATSConfigFile != "" && cfg.NATSURL == "")
			select {
			case <-ctx.Done():
				log.Info("signal received, draining (a second signal stops at once)")
			case ferr := <-b.Fatal():
				// A NATS connection closed for good: stop loudly rather
				// than stay up serving nothing (SPEC.md §9).
				stopSignals()
				drain, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				return errors.Join(ferr, b.Stop(drain))
			}
			stopSignals()
			drain, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			return b.Stop(drain)
		},
	}
	db.register(cmd)
	f := cmd.Flags()
	jwt.register(f)
	sec.register(f)
	f.StringVar(&cfg.HTTPAddr, "http-addr", envOr("QUEEN_HTTP_ADDR", "127.0.0.1:6632"), "HTTP listen address (env QUEEN_HTTP_ADDR)")
	f.StringVar(&cfg.NATSListen, "nats-listen", envOr("QUEEN_NATS_LISTEN", "127.0.0.1:4222"), "embedded NATS listen address (env QUEEN_NATS_LISTEN)")
	f.StringVar(&cfg.NATSURL, "nats-url", os.Getenv("NATS_URL"), "external NATS server URL instead of the embedded one, or a comma-separated list of a NATS cluster's servers (env NATS_URL)")
	f.IntVar(&cfg.MaxPayloadBytes, "max-payload-bytes", queen.DefaultMaxPayloadBytes, "largest item payload in bytes, default 4 MiB (env QUEEN_MAX_PAYLOAD_BYTES; docs/contract.md §10)")
	f.StringVar(&logLevel, "log-level", envOr("QUEEN_LOG_LEVEL", "info"), "log level: debug, info, warn, error (env QUEEN_LOG_LEVEL)")
	f.StringVar(&dedupCache, "dedup-cache", envOr("QUEEN_DEDUP_CACHE", "on"), "broker-side dedup cache: on or off (env QUEEN_DEDUP_CACHE; switch live with POST /api/v1/admin/dedup-cache)")
	f.IntVar(&cfg.DedupCacheMB, "dedup-cache-mb", 512, "memory budget of the dedup cache for all partitions, MiB (env QUEEN_DEDUP_CACHE_MB)")
	f.DurationVar(&cfg.Retention.Interval, "retention-interval", persistence.DefaultRetentionInterval, "pause between retention passes, a Go duration (env QUEEN_RETENTION_INTERVAL)")
	f.IntVar(&cfg.Retention.Batch, "retention-batch", persistence.DefaultRetentionBatch, "most rows (and about most messages) one retention statement deletes (env QUEEN_RETENTION_BATCH)")
	f.DurationVar(&cfg.SidecarRange, "sidecar-range", persistence.DefaultSidecarRange, "time span of one range of the per-hash sidecar index, whole seconds from 1s to 24h; expired ranges are dropped whole (env QUEEN_SIDECAR_RANGE)")
	f.DurationVar(&cfg.LockTimeout, "lock-timeout", persistence.DefaultLockTimeout, "longest wait for one row lock (a partition's in a push or transaction, a consumer row's in an ack), a Go duration from 1ms to 10m; a push whose partition's lock is held longer answers that partition's items failed with code lock_timeout and commits its other partitions (env QUEEN_LOCK_TIMEOUT)")
	f.DurationVar(&cfg.Retention.TxnsFloor, "test-txns-floor", persistence.DefaultTxnsFloor, "TEST ONLY: least age of an expired sidecar entry; production keeps the default (env QUEEN_TEST_TXNS_FLOOR)")
	_ = f.MarkHidden("test-txns-floor")
	f.DurationVar(&cfg.ShardLease, "shard-lease", shards.DefaultLease, "how long a shard lease lives without renewal, a Go duration; renewed every third of it, and a dead broker's shards move after it (env QUEEN_SHARD_LEASE)")
	f.DurationVar(&cfg.PartitionIdle, "partition-idle", broker.DefaultPartitionIdle, "a partition actor with no push for this long is passivated (stopped, its memory freed; the next push spawns it again), a Go duration from 1s to 24h, or 0 to keep every partition active (env QUEEN_PARTITION_IDLE)")
	f.IntVar(&cfg.PartitionMemoryMB, "partition-memory-mb", broker.DefaultPartitionMemoryMB, "heap the active partition actors may hold, MiB, from 1 to 65536, or 0 for no bound: at most this ÷ 1400 bytes are alive at once (256 MiB: about 191,700), the least recently pushed passivated first past it (env QUEEN_PARTITION_MEMORY_MB)")
	f.IntVar(&cfg.ShardCount, "shard-count", 0, "shards of a new cluster (64 when 0); fixed at creation, a broker with another count refuses to start (env QUEEN_SHARD_COUNT)")
	return cmd
}

// clusterSettings applies QUEEN_SHARD_LEASE and QUEEN_SHARD_COUNT where their
// flags were not given and checks them (SPEC.md §9).
func clusterSettings(cmd *cobra.Command, cfg *broker.Config) error {
	f := cmd.Flags()
	if v := os.Getenv("QUEEN_SHARD_LEASE"); v != "" && !f.Changed("shard-lease") {
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("QUEEN_SHARD_LEASE=%q is not a Go duration (for example 10s or 1m)", v)
		}
		cfg.ShardLease = d
	}
	if v := os.Getenv("QUEEN_SHARD_COUNT"); v != "" && !f.Changed("shard-count") {
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("QUEEN_SHARD_COUNT=%q is not a whole number of shards", v)
		}
		cfg.ShardCount = n
	}
	if cfg.ShardLease < time.Second || cfg.ShardLease > time.Hour {
		return fmt.Errorf("shard lease %v (--shard-lease, QUEEN_SHARD_LEASE): want 1s to 1h, for example 10s", cfg.ShardLease)
	}
	if cfg.ShardCount < 0 || cfg.ShardCount > 65536 {
		return fmt.Errorf("shard count %d (--shard-count, QUEEN_SHARD_COUNT): want 1 to 65536, or 0 for the cluster's (64 for a new one)", cfg.ShardCount)
	}
	return nil
}

// partitionIdleSettings applies QUEEN_PARTITION_IDLE where --partition-idle
// was not given and checks it: 0 (passivation off) or 1s to 24h.
// cmd nil: the environment alone over *d (loadtest --embedded).
func partitionIdleSettings(cmd *cobra.Command, d *time.Duration) error {
	if v := os.Getenv("QUEEN_PARTITION_IDLE"); v != "" && (cmd == nil || !cmd.Flags().Changed("partition-idle")) {
		n, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("QUEEN_PARTITION_IDLE=%q is not a Go duration (for example 2m, or 0 to turn passivation off)", v)
		}
		*d = n
	}
	if *d != 0 && (*d < time.Second || *d > 24*time.Hour) {
		return fmt.Errorf("partition idle %v (--partition-idle, QUEEN_PARTITION_IDLE): want 0 (off) or 1s to 24h, for example 2m", *d)
	}
	return nil
}

// partitionMemorySettings applies QUEEN_PARTITION_MEMORY_MB where
// --partition-memory-mb was not given and checks it: 0 (no bound) or 1 to
// 65536 MiB. cmd nil: the environment alone over *mb (loadtest --embedded).
func partitionMemorySettings(cmd *cobra.Command, mb *int) error {
	if v := os.Getenv("QUEEN_PARTITION_MEMORY_MB"); v != "" && (cmd == nil || !cmd.Flags().Changed("partition-memory-mb")) {
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("QUEEN_PARTITION_MEMORY_MB=%q is not a whole number of MiB (for example 256, or 0 for no bound)", v)
		}
		*mb = n
	}
	if *mb < 0 || *mb > 65536 {
		return fmt.Errorf("partition memory %d MiB (--partition-memory-mb, QUEEN_PARTITION_MEMORY_MB): want 0 (no bound) or 1 to 65536, for example 256", *mb)
	}
	return nil
}

// dedupCacheSettings validates the dedup cache settings (SPEC.md §8) into cfg.
func dedupCacheSettings(cfg *broker.Config, mode string) error {
	switch strings.ToLower(mode) {
	case "on", "true", "1", "":
	case "off", "false", "0":
		cfg.DedupCacheOff = true
	default:
		return fmt.Errorf("QUEEN_DEDUP_CACHE / --dedup-cache = %q: want on or off", mode)
	}
	if cfg.DedupCacheMB < 1 {
		return fmt.Errorf("--dedup-cache-mb %d: want at least 1", cfg.DedupCacheMB)
	}
	return nil
}

// sidecarSettings applies QUEEN_SIDECAR_RANGE where --sidecar-range was not
// given and checks it (persistence.CheckSidecarRange).
// cmd nil: the environment alone (loadtest --embedded).
func sidecarSettings(cmd *cobra.Command, span *time.Duration) error {
	if *span == 0 {
		*span = persistence.DefaultSidecarRange
	}
	if v := os.Getenv("QUEEN_SIDECAR_RANGE"); v != "" && (cmd == nil || !cmd.Flags().Changed("sidecar-range")) {
		n, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("QUEEN_SIDECAR_RANGE=%q is not a Go duration (for example 5m)", v)
		}
		*span = n
	}
	if err := persistence.CheckSidecarRange(*span); err != nil {
		return fmt.Errorf("--sidecar-range, QUEEN_SIDECAR_RANGE: %w", err)
	}
	return nil
}

// lockSettings applies QUEEN_LOCK_TIMEOUT where --lock-timeout was not
// given and checks it (persistence.Config.LockTimeout). cmd nil: the
// environment alone (loadtest --embedded).
func lockSettings(cmd *cobra.Command, d *time.Duration) error {
	if *d == 0 {
		*d = persistence.DefaultLockTimeout
	}
	if v := os.Getenv("QUEEN_LOCK_TIMEOUT"); v != "" && (cmd == nil || !cmd.Flags().Changed("lock-timeout")) {
		n, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("QUEEN_LOCK_TIMEOUT=%q is not a Go duration (for example 5s or 500ms)", v)
		}
		*d = n
	}
	if *d < time.Millisecond || *d > 10*time.Minute {
		return fmt.Errorf("lock timeout %v (--lock-timeout, QUEEN_LOCK_TIMEOUT): want 1ms to 10m, for example 5s", *d)
	}
	return nil
}

// retentionSettings applies QUEEN_RETENTION_INTERVAL, QUEEN_RETENTION_BATCH
// and the test-only QUEEN_TEST_TXNS_FLOOR where their flags were not given,
// and checks the values: bad ones stop the start with an error naming them.
func retentionSettings(cmd *cobra.Command, rc *persistence.RetentionConfig) error {
	f := cmd.Flags()
	for _, d := range []struct {
		flag, env string
		dst       *time.Duration
	}{
		{"retention-interval", "QUEEN_RETENTION_INTERVAL", &rc.Interval},
		{"test-txns-floor", "QUEEN_TEST_TXNS_FLOOR", &rc.TxnsFloor},
	} {
		if v := os.Getenv(d.env); v != "" && !f.Changed(d.flag) {
			n, err := time.ParseDuration(v)
			if err != nil {
				return fmt.Errorf("%s=%q is not a Go duration (for example 5s, 500ms or 1m)", d.env, v)
			}
			*d.dst = n
		}
	}
	if v := os.Getenv("QUEEN_RETENTION_BATCH"); v != "" && !f.Changed("retention-batch") {
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("QUEEN_RETENTION_BATCH=%q is not a whole number of rows", v)
		}
		rc.Batch = n
	}
	if rc.Interval <= 0 {
		return fmt.Errorf("retention interval %v (--retention-interval, QUEEN_RETENTION_INTERVAL): want a positive duration, for example 5s", rc.Interval)
	}
	if rc.Batch < 1 || rc.Batch > 1_000_000 {
		return fmt.Errorf("retention batch %d (--retention-batch, QUEEN_RETENTION_BATCH): want 1 to 1000000 rows", rc.Batch)
	}
	if rc.TxnsFloor <= 0 {
		return fmt.Errorf("sidecar floor %v (QUEEN_TEST_TXNS_FLOOR, test only): want a positive duration", rc.TxnsFloor)
	}
	return nil
}
