package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/queen-mq/queen-go/cmd/queen/internal/broker"
	"github.com/queen-mq/queen-go/loadtest"
	"github.com/queen-mq/queen-go/loadtest/chaos"
	"github.com/queen-mq/queen-go/loadtest/report"
	"github.com/queen-mq/queen-go/transport/client"
)

// loadtestOutput is what a run writes besides its progress: the report
// as JSON (--json) or text, a CPU profile (--cpuprofile) and the HTML
// report (--report).
type loadtestOutput struct {
	json                   bool
	cpuProfile, reportFile string
}

// loadtestFlags are the settings of one `queen loadtest`: the harness's
// Config and the command's own switches.
type loadtestFlags struct {
	cfg                   loadtest.Config
	targetFrom            string // which setting named the target
	mode, pgBin, logLevel string
	tls                   clientTLS // --ca-file, --client-cert, --client-key
	// natsCreds, natsNkey, natsUser: --nats-creds, --nats-nkey,
	// --nats-user (the password from NATS_PASSWORD).
	natsCreds, natsNkey, natsUser string
	embedded, compare             bool
	out                           loadtestOutput
	// cluster is the chaos room's cluster of broker processes (--brokers,
	// --nats-nodes, --pg-standby, --shard-lease); Brokers 0: none.
	cluster chaos.ClusterConfig
}

func loadtestCmd() *cobra.Command {
	lf := &loadtestFlags{cfg: loadtest.DefaultConfig()}
	// The target is found as `queen push` finds its broker (defaultNATSURL:
	// NATS_URL, else nats://<QUEEN_NATS_LISTEN>, else 127.0.0.1:4222), so a
	// run beside `queen serve` loads the broker whose database it audits.
	lf.cfg.Target, lf.targetFrom = defaultNATSURL()
	cmd := &cobra.Command{
		Use:     "loadtest",
		Short:   "Drive a broker with producers over NATS or HTTP, report throughput and latency, and audit the database",
		Long:    loadtestLong,
		Example: loadtestExample,
		RunE:    lf.run,
	}
	cmd.AddCommand(loadtestReportCmd())
	// The flags, per room (loadtest_flags.go).
	f := cmd.Flags()
	lf.runFlags(f)
	produceFlags(f, &lf.cfg)
	consumersFlags(f, &lf.cfg.Consumption)
	chaosFlags(f, &lf.cfg.Chaos, &lf.cluster)
	timelineFlags(f, &lf.cfg)
	return cmd
}

// run is the command: a cluster of broker processes (--brokers), an
// in-process broker (--embedded), or the broker at the target.
func (lf *loadtestFlags) run(cmd *cobra.Command, _ []string) error {
	ctx := cmd.Context()
	lf.cfg.Mode = loadtest.Mode(lf.mode)
	tc, err := lf.tls.config()
	if err != nil {
		return fmt.Errorf("--ca-file, --client-cert: %w", err)
	}
	lf.cfg.TLS = tc
	auth := client.NATSAuth{Creds: lf.natsCreds, NkeySeed: lf.natsNkey, User: lf.natsUser, Password: os.Getenv("NATS_PASSWORD")}
	if strings.HasPrefix(lf.cfg.Target, "nats://") {
		auth.CAFile = lf.tls.caFile // a NATS target with TLS
	}
	opts, err := auth.Options(false)
	if err != nil {
		return err
	}
	lf.cfg.NATSOptions = opts
	if (lf.cfg.FailMode == loadtest.FailCrash || lf.cfg.FailMode == loadtest.FailCrashBatch) && !cmd.Flags().Changed("consume-lease") {
		lf.cfg.LeaseSeconds = 0 // the crash-mode default (2 s)
	}
	stderr := cmd.ErrOrStderr()
	if lf.out.reportFile != "" && lf.compare {
		return errors.New("--report draws one run's timeline and --compare's rounds have none to draw: drop --report, or run each mode alone with --json and compare them with queen loadtest report")
	}
	lf.cfg.Progress = stderr
	lf.cfg.ProgressLive = isTerminal(stderr)
	if lf.cluster.Brokers > 0 {
		if lf.embedded || lf.compare {
			return errors.New("--brokers starts its own brokers: drop --embedded and --compare")
		}
		if !cmd.Flags().Changed("log-level") {
			lf.logLevel = "info" // the brokers' log files
		}
		return runClusterLoadtest(ctx, cmd, lf.cfg, lf.cluster, lf.pgBin, lf.logLevel, lf.out)
	}
	if lf.cluster.PGStandby {
		return errors.New("--pg-standby gives the managed PostgreSQL of --brokers N a standby: pass --brokers N")
	}
	if lf.cluster.NATSNodes != 0 {
		return errors.New("--nats-nodes gives the brokers of --brokers N a NATS cluster: pass --brokers N")
	}
	switch {
	case lf.cfg.Chaos.Mode == "" || lf.cfg.Chaos.Mode == chaos.None:
	case lf.cfg.Chaos.Mode == chaos.PGRestart && lf.embedded && !lf.compare:
		chaosClients(cmd, &lf.cfg, 0)
	case lf.cfg.Chaos.Mode == chaos.PGRestart:
		return errors.New("--chaos pg-restart needs a PostgreSQL of its own: pass --brokers N or --embedded (without --compare)")
	case lf.cfg.Chaos.Mode == chaos.NATSKill:
		return errors.New("--chaos nats-kill kills a node of a NATS cluster of its own: pass --brokers N --nats-nodes M (M at least 2)")
	default:
		return fmt.Errorf("--chaos %s needs brokers of its own: pass --brokers N", lf.cfg.Chaos.Mode)
	}
	if lf.embedded {
		log, err := newLogger(lf.logLevel)
		if err != nil {
			return err
		}
		defer flushLog(log)
		return withEmbeddedBroker(ctx, stderr, log, lf.pgBin, func(b *broker.Broker) error {
			if strings.HasPrefix(lf.cfg.Target, "http") {
				lf.cfg.Target = b.HTTPURL()
			} else {
				lf.cfg.Target = b.NATSURL()
			}
			lf.cfg.DatabaseURL = b.DatabaseURL()
			// The broker's /metrics is this process's: its RSS
			// includes the harness.
			lf.cfg.MetricsURLs, lf.cfg.SelfRSS = []string{b.HTTPURL()}, true
			if lf.cfg.Chaos.Mode == chaos.PGRestart {
				lf.cfg.Chaos.RestartPostgres = b.RestartPostgres
			}
			return runLoadtest(ctx, cmd.OutOrStdout(), lf.cfg, lf.compare, lf.out)
		})
	}
	if lf.cfg.DatabaseURL == "" {
		lf.cfg.DatabaseURL = defaultAuditURL()
	}
	if cmd.Flags().Changed("target") {
		lf.targetFrom = "--target"
	}
	fmt.Fprintf(stderr, "loadtest: target %s (from %s)\n", lf.cfg.Target, lf.targetFrom)
	return runLoadtest(ctx, cmd.OutOrStdout(), lf.cfg, lf.compare, lf.out)
}

const loadtestLong = `Drive a broker with producers over NATS (default) or HTTP, then audit its database:
each transactionId answered queued or duplicate is stored exactly once, every repeat
was answered duplicate with the original's id, an id only ever answered failed is
stored at most once, nothing else is stored. A failed audit exits non-zero.

Without --target the broker is found as queen push finds it: NATS_URL, else
nats://<QUEEN_NATS_LISTEN>, else nats://127.0.0.1:4222; the audit reads
$QUEEN_DATA_DIR/postgres.url (or --database-url), so beside queen serve both name the
same broker.

Each producer has one request in flight; each request holds --batch items spread over
--partitions partitions of a fresh queue (loadtest-<unix nanos>). --dup-ratio of the
items re-send a transactionId already sent to the same partition; items answered
failed are retried with the same transactionId (up to 8 sends, with backoff).
Over NATS each producer has its own connection, like independent clients;
--connections N makes them share N connections round robin, like the goroutines
of one program.

--producer-mode async makes each producer publish single items through the Go client's
async producer (client.Producer), which batches them per request (up to --max-batch
items, default --batch or 100 when --batch is 1, after a --linger of 5ms), keeps up to 8
requests in flight, and retries failed items and timed-out requests with the same
transactionIds; --in-flight bounds each producer's outstanding items (default 1000). The
latency is then each item's, from publish to verdict. The audit is the same.

--mode raw writes the same batches straight into PostgreSQL with COPY (table
queen_raw.loadtest_<unix nanos>, one row per item, no dedup). --compare runs broker and
raw alternately, three rounds each, and prints the median ratio of stored messages/s.
--embedded starts a broker in-process (embedded NATS, managed PostgreSQL) in a
temporary folder and removes it afterwards, also after Ctrl-C.

--consumers N adds N consumers per consumer group (--groups, named <queue>-g0, ...)
that long-poll the queue from the start over the same target, ack each popped batch
by offset, and keep going after the producers stop until every group's cursor is at
every partition's last offset (failing when no cursor moves for --drain-timeout). --fail-ratio of the messages are
poison (chosen by a hash of the transactionId): the handler fails every delivery, so
each is delivered retryLimit+1 times per group and dead-lettered once. With
--fail-mode nack (the default) the consumer acks it failed; with --fail-mode crash it
acks the messages before it and abandons the rest of the batch and its lease, as a
consumer that crashes would; with --fail-mode crash-batch it handles the whole batch and
acks nothing when a poison message crashes it (a handler that acks its batch at the end).
The broker bisects an expired span of several unacked messages (nothing charged) until
the poison message expires alone, which counts the failure; its dead letter says "lease
expired" (leaseTime 2 s unless --consume-lease). The report's "poison" section counts
the abandoned leases, the seconds partitions waited on a poison message, and the
brokers' lease expiries and bisections (their /metrics). The queue is
configured with --retry-limit first. The end-to-end audit then checks, per group:
every other stored message acked exactly once, every poison message in the DLQ once
with attempts retryLimit+1, nothing else dead-lettered, the cursors at the end, no
ack answered unresolvable or lease_invalid. It checks and forgets, as the run goes,
what every group's cursor has passed, so its memory follows the backlog; with
--retention a message a group passed unacked at least the retention after it was
stored is counted "expired before acked" for that group, not lost. The report adds consume throughput,
push-commit-to-handler latency, and a wake-latency probe (a parked long poll, one
push, the time to the pop's reply).

--brokers N starts N broker processes (` + "`queen serve`" + ` of this binary) sharing one
managed PostgreSQL and one NATS server run by the load test, in a temporary folder
removed afterwards (the brokers' logs are kept when the run fails). Over NATS the
queue group spreads the requests over the brokers; over HTTP (--target http://...)
each producer and consumer starts at one broker, round robin, and moves to the next
one when its broker does not answer. --nats-nodes M (with --brokers) replaces the
load test's NATS server by a NATS cluster of M node processes (hidden queen nats-node
commands of this binary, each a nats-server node) routed to each other on loopback:
the brokers' NATS_URL and the clients' target list every node; the NATS client picks
a random node of the list for each of a broker's two connections, and producer or
consumer i starts at node i mod M.

--chaos injects faults while the producers run, the first half an interval into the
load, then one every --chaos-interval (20s for kill, 10s for the others; with --brokers
at least twice --shard-lease, 5s with chaos), none after --duration: kill (--brokers)
kills a random broker with SIGKILL and restarts it on the same port after --chaos-pause
(1s); stop (--brokers) freezes a random broker with SIGSTOP for --chaos-pause (5s), then
resumes it with SIGCONT; pg-restart (--brokers or --embedded) restarts the managed
PostgreSQL (pg_ctl stop -m fast, then a start on the same folder and port); pg-failover
(--brokers with --pg-standby, which gives the managed PostgreSQL a synchronous streaming
standby and the brokers a multi-host DATABASE_URL) SIGKILLs the primary and promotes the
standby, once per run; nats-kill (--brokers with --nats-nodes 2 or more) SIGKILLs the
NATS nodes in turn (skipping those without a broker connection) and restarts each on
its ports after --chaos-pause (5s), where it rejoins the cluster: its recovery time is from the kill until the other nodes hold
every broker's NATS connections again with their subscriptions (at most the 15 s ping
budget); mixed (--brokers) injects one of each per round (nats-kill with 2 or more
NATS nodes), in an order drawn from --chaos-seed. Requests
time out after 5s and items are retried with the same transactionIds until they get a
verdict. The audits then prove nothing answered queued was lost, no id is stored twice,
every acked message stayed acked; the report adds a chaos section (the faults by kind,
when each recovered, the client errors and failed items during and after each, and
outside them) and, with --brokers, a cluster section (how long shards had no live owner).

Soak runs: every --sample-every (default 10s) the run records a timeline point
(stored/s and items/s of the interval, its p50/p99 latency, the broker's RSS and dedup
cache bytes, evictions and hydrations from its /metrics, the database's size, the hash
sidecar's size and the WAL written since the start) and prints it as a line; the report
adds the timeline and, for runs of 5 minutes or more, the sustained ratio (median
stored/s of the last quarter over the first quarter, after one minute of warm-up).
Figures a run cannot know (the broker's RSS and cache over NATS, without /metrics)
print n/a. The audit reads each partition's new
segments at every sample, so its memory stays at a few bits per transactionId and a run
with --retention (segments deleted while it goes on) is audited before they go; without
retention a final pass recounts every stored frame. --dedup-window and --retention
configure the run's queue; repeats are only sent while their original is younger than a
quarter of the window, retries only within half of it.

--report FILE.html also writes the report as one self-contained HTML page (nothing
fetched to open it): the settings, the summary and charts of the timeline (stored,
acked and sent per second, push and end-to-end latency, memory, bytes per message,
database size and WAL) with every fault marked where it happened. queen loadtest
report A.json B.json -o compare.html overlays runs saved with --json.`

const loadtestExample = `  queen loadtest --embedded --duration 20s
  queen loadtest --target nats://127.0.0.1:4222 --duration 60s --json
  queen loadtest --target http://127.0.0.1:6632 --database-url postgres://...
  queen loadtest --embedded --compare --duration 20s
  queen loadtest --embedded --duration 20s --producer-mode async --batch 1
  queen loadtest --embedded --duration 20s --consumers 4 --groups 2 --fail-ratio 0.02
  queen loadtest --brokers 3 --chaos kill --duration 60s --dup-ratio 0.2 --consumers 3 --json
  queen loadtest --brokers 3 --chaos mixed --duration 120s --consumers 3 --fail-ratio 0.01 --fail-mode crash --json
  queen loadtest --embedded --duration 60s --consumers 3 --fail-ratio 0.001 --fail-mode crash-batch --json
  queen loadtest --embedded --chaos pg-restart --duration 60s --json
  queen loadtest --brokers 3 --nats-nodes 3 --chaos nats-kill --duration 120s --json
  queen loadtest --brokers 2 --pg-standby --chaos pg-failover --duration 120s --json
  queen loadtest --embedded --duration 1h --producers 32 --dedup-window 1m --retention 2m --json
  queen loadtest --embedded --duration 5m --consumers 2 --report run.html --json > run.json
  queen loadtest report before.json run.json -o compare.html`

// runClusterLoadtest starts ccfg.Brokers processes of this binary with their
// PostgreSQL and NATS (chaos.StartCluster), drives them, and stops
// everything, also after Ctrl-C.
func runClusterLoadtest(ctx context.Context, cmd *cobra.Command, cfg loadtest.Config, ccfg chaos.ClusterConfig,
	pgBin, logLevel string, o loadtestOutput) (err error) {
	stderr := cmd.ErrOrStderr()
	lease := ccfg.Lease
	if cfg.Chaos.Mode == chaos.PGFailover && !ccfg.PGStandby {
		return errors.New("--chaos pg-failover promotes a standby: pass --pg-standby")
	}
	if ccfg.NATSNodes < 0 || ccfg.NATSNodes > 9 {
		return fmt.Errorf("--nats-nodes %d: want 0 (one NATS server in this process) to 9", ccfg.NATSNodes)
	}
	if cfg.Chaos.Mode == chaos.NATSKill && ccfg.NATSNodes < 2 {
		return fmt.Errorf("--chaos nats-kill kills a node of a NATS cluster and needs at least 2 (--nats-nodes %d): pass --nats-nodes 3", ccfg.NATSNodes)
	}
	withChaos := chaos.On(cfg.Chaos.Mode)
	if withChaos {
		if lease == 0 {
			lease = 5 * time.Second
		}
		chaosClients(cmd, &cfg, lease)
	}
	if lease != 0 && (lease < time.Second || lease > time.Hour) {
		return fmt.Errorf("shard lease %s: want 1s to 1h", lease)
	}
	// Check the chaos settings before starting anything.
	eff := lease
	if eff == 0 {
		eff = 10 * time.Second
	}
	if withChaos && cfg.Chaos.Interval < 2*eff {
		return fmt.Errorf("chaos interval %s: want at least twice the shard lease (%s)", cfg.Chaos.Interval, 2*eff)
	}
	if withChaos && cfg.Chaos.Pause >= cfg.Chaos.Interval {
		return fmt.Errorf("chaos pause %s: want less than the chaos interval %s", cfg.Chaos.Pause, cfg.Chaos.Interval)
	}
	ccfg.PGBin, ccfg.Lease, ccfg.LogLevel, ccfg.TempParent, ccfg.Status = pgBin, lease, logLevel, embeddedTempParent, stderr
	cl, err := chaos.StartCluster(ctx, ccfg)
	if err != nil {
		return fmt.Errorf("start %d brokers: %w", ccfg.Brokers, err)
	}
	defer func() {
		if cerr := cl.Close(err != nil); cerr != nil {
			err = errors.Join(err, fmt.Errorf("stop the cluster: %w", cerr))
		}
	}()
	cfg.Chaos.Cluster = cl
	cfg.DatabaseURL = cl.DatabaseURL()
	cfg.MetricsURLs = cl.HTTPURLs()
	if strings.HasPrefix(cfg.Target, "http") {
		cfg.Targets = cl.HTTPURLs()
		cfg.Target = cfg.Targets[0]
	} else {
		cfg.Target = cl.NATSURL()
	}
	if ctx.Err() != nil {
		return errors.New("loadtest interrupted")
	}
	return runLoadtest(ctx, cmd.OutOrStdout(), cfg, false, o)
}

// chaosClients sets the clients up for a --chaos run: requests time out
// after 5 s (unless --request-timeout: a request a killed or frozen broker
// had is never answered), items are retried with the same transactionIds
// until they get a verdict (a fault must not make the producers give up),
// the retries after the load may outlast a fault's recovery, and the
// interval is the mode's default unless --chaos-interval. lease is the
// brokers' shard lease (0: none of ours, --embedded).
func chaosClients(cmd *cobra.Command, cfg *loadtest.Config, lease time.Duration) {
	if !cmd.Flags().Changed("request-timeout") {
		cfg.RequestTimeout = 5 * time.Second
	}
	cfg.MaxAttempts = 255
	cfg.DrainTimeout = max(15*time.Second, 2*lease+cfg.RequestTimeout+max(cfg.Chaos.Pause, 5*time.Second)+5*time.Second)
	if cfg.Chaos.Interval <= 0 {
		cfg.Chaos.Interval = chaos.DefaultInterval(cfg.Chaos.Mode)
	}
}

// defaultAuditURL is the URL a managed broker wrote to
// $QUEEN_DATA_DIR/postgres.url, else DATABASE_URL (or PG_*), else "".
func defaultAuditURL() string {
	if b, err := os.ReadFile(filepath.Join(envOr("QUEEN_DATA_DIR", ".queen"), "postgres.url")); err == nil {
		if u := strings.TrimSpace(string(b)); u != "" {
			return u
		}
	}
	return databaseURLFromEnv()
}

func runLoadtest(ctx context.Context, out io.Writer, cfg loadtest.Config, compare bool, o loadtestOutput) (err error) {
	// The report's file is created before the run, so a path that cannot
	// be written fails now rather than after an hour.
	var html *os.File
	if o.reportFile != "" {
		if html, err = os.Create(o.reportFile); err != nil {
			return fmt.Errorf("--report: %w", err)
		}
		defer func() {
			if cerr := html.Close(); cerr != nil {
				err = errors.Join(err, fmt.Errorf("--report: %w", cerr))
			}
		}()
	}
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	var result interface{ WriteText(io.Writer) }
	var interrupted bool
	if compare {
		var c *report.Comparison
		c, err = loadtest.Compare(ctx, cfg, 3)
		if c != nil {
			result, interrupted = c, c.Interrupted
		}
	} else {
		var r *report.Report
		r, err = loadtest.Run(ctx, cfg)
		if r != nil {
			result, interrupted = r, r.Interrupted
		}
		if html != nil {
			err = errors.Join(err, writeHTMLReport(html, cfg.Progress, r))
		}
	}
	if result != nil {
		if o.json {
			b, jerr := json.Marshal(result)
			if jerr != nil {
				return jerr
			}
			fmt.Fprintln(out, string(b))
		} else {
			result.WriteText(out)
		}
	}
	if err == nil && interrupted {
		err = errors.New("loadtest interrupted")
	}
	return err
}

// embeddedHarnessHeadroom is the load harness's share of the soft memory
// limit with --embedded, beside the broker's: none. Its ledger's bitmap is
// mapped outside the Go heap (loadtest's newChunk) and its awaited ids (tens
// of MB) fit the broker's headroom, so an embedded run is held to the limit
// a broker alone has and its RSS compares with the same target.
const embeddedHarnessHeadroom = 0

// The embedded broker's HTTP address and the parent of its temporary folder
// ("" = os.TempDir()); tests change them.
var (
	embeddedHTTPAddr   = "127.0.0.1:0"
	embeddedTempParent = ""
)

// withEmbeddedBroker starts a broker on embedded defaults (embedded NATS and
// a managed PostgreSQL, random ports) in a fresh temporary folder, runs fn,
// then stops the broker (which stops its PostgreSQL) and removes the folder
// and, when the cluster lives outside it (root, see persistence/localpg),
// the cluster area too. The broker is started on a context that an
// interrupt does not cancel, so an early Ctrl-C still ends in a clean stop.
func withEmbeddedBroker(ctx context.Context, stderr io.Writer, log *slog.Logger, pgBin string, fn func(*broker.Broker) error) (err error) {
	dir, err := os.MkdirTemp(embeddedTempParent, "queen-loadtest-")
	if err != nil {
		return err
	}
	// Reachable by the postgres OS user when running as root, so the
	// cluster lives inside the folder.
	if err := os.Chmod(dir, 0o755); err != nil {
		os.RemoveAll(dir)
		return err
	}
	dataDir := filepath.Join(dir, "data")
	fmt.Fprintf(stderr, "loadtest: embedded broker in %s\n", dir)
	removeAll := func() {
		area := clusterArea(dataDir)
		if area != "" && !strings.HasPrefix(area, dir+string(filepath.Separator)) {
			if rerr := os.RemoveAll(area); rerr != nil {
				err = errors.Join(err, rerr)
			}
		}
		if rerr := os.RemoveAll(dir); rerr != nil {
			err = errors.Join(err, rerr)
		}
	}

	bcfg := broker.Config{
		DataDir:       dataDir,
		HTTPAddr:      embeddedHTTPAddr,
		NATSListen:    "127.0.0.1:0",
		PGBin:         pgBin,
		Version:       version,
		Logger:        log,
		DedupCacheMB:  512,
		PartitionIdle: broker.DefaultPartitionIdle,
		// As serve's default; QUEEN_PARTITION_MEMORY_MB below.
		PartitionMemoryMB: broker.DefaultPartitionMemoryMB,
	}
	// The embedded broker takes the dedup cache settings from the
	// environment, as `queen serve` does.
	if err := envInt(nil, "", "QUEEN_DEDUP_CACHE_MB", &bcfg.DedupCacheMB); err != nil {
		removeAll()
		return err
	}
	if err := dedupCacheSettings(&bcfg, envOr("QUEEN_DEDUP_CACHE", "on")); err != nil {
		removeAll()
		return err
	}
	if err := sidecarSettings(nil, &bcfg.SidecarRange); err != nil {
		removeAll()
		return err
	}
	if err := lockSettings(nil, &bcfg.LockTimeout); err != nil {
		removeAll()
		return err
	}
	if err := partitionIdleSettings(nil, &bcfg.PartitionIdle); err != nil {
		removeAll()
		return err
	}
	if err := partitionMemorySettings(nil, &bcfg.PartitionMemoryMB); err != nil {
		removeAll()
		return err
	}
	// JWT_ENABLED and the other JWT_* variables, as serve reads them: the
	// run's clients then send --token.
	var jf jwtFlags
	jf.register(pflag.NewFlagSet("jwt", pflag.ContinueOnError))
	if bcfg.JWT, err = jf.settings(nil); err != nil {
		removeAll()
		return err
	}
	// The broker's memory limit, as serve sets it, plus the harness's share
	// (its ledger is a few bits per id; see loadtest's timeline).
	serveMemoryLimit(int64(bcfg.DedupCacheMB)<<20+embeddedHarnessHeadroom, bcfg.PartitionMemoryMB)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Minute)
	b, err := broker.Start(sctx, bcfg)
	cancel()
	if err != nil {
		// A failed Start has stopped what it started, the managed PostgreSQL included.
		removeAll()
		return fmt.Errorf("start the embedded broker: %w", err)
	}
	fmt.Fprintf(stderr, "loadtest: embedded PostgreSQL cluster in %s\n", clusterArea(dataDir))
	fmt.Fprintf(stderr, "loadtest: embedded broker ready: NATS %s, HTTP %s\n", b.NATSURL(), b.HTTPURL())
	defer func() {
		fmt.Fprintln(stderr, "loadtest: stopping the embedded broker")
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if serr := b.Stop(sctx); serr != nil {
			// PostgreSQL may still run: keep its files and say where.
			err = errors.Join(err, fmt.Errorf("stop the embedded broker (its folder %s is kept): %w", dir, serr))
			return
		}
		removeAll()
		fmt.Fprintf(stderr, "loadtest: embedded broker stopped, %s removed\n", dir)
	}()
	if ctx.Err() != nil {
		return errors.New("loadtest interrupted")
	}
	return fn(b)
}

// clusterArea is the managed PostgreSQL's folder for dataDir: the one
// dataDir/postgres.dir names (root, see persistence/localpg), else
// dataDir/postgres.
func clusterArea(dataDir string) string {
	if b, err := os.ReadFile(filepath.Join(dataDir, "postgres.dir")); err == nil {
		if p := strings.TrimSpace(string(b)); filepath.IsAbs(p) {
			return p
		}
	}
	return filepath.Join(dataDir, "postgres")
}

// isTerminal reports whether w is a terminal (a character device).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
