package loadtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/queen-mq/queen-go/loadtest/chaos"
	"github.com/queen-mq/queen-go/loadtest/consumers"
	"github.com/queen-mq/queen-go/loadtest/produce"
	"github.com/queen-mq/queen-go/loadtest/report"
	"github.com/queen-mq/queen-go/loadtest/txnid"
	"github.com/queen-mq/queen-go/transport/client"
)

// Mode is what a run writes through (Config.Mode): report.Mode, named
// here for the callers of Run.
type Mode = report.Mode

// The modes (Config.Mode), named in report.
const (
	// ModeBroker: see report.ModeBroker.
	ModeBroker = report.ModeBroker
	// ModeRaw: see report.ModeRaw.
	ModeRaw = report.ModeRaw
)

// The producer modes (Config.ProducerMode), named in report.
const (
	// ProducerSync: see report.ProducerSync.
	ProducerSync = report.ProducerSync
	// ProducerAsync: see report.ProducerAsync.
	ProducerAsync = report.ProducerAsync
)

// The fail modes of Config.FailMode, named in txnid (where the poison rule
// lives) and repeated here for the callers of Run.
const (
	// FailNack: see txnid.FailNack.
	FailNack = txnid.FailNack
	// FailCrash: see txnid.FailCrash.
	FailCrash = txnid.FailCrash
	// FailCrashBatch: see txnid.FailCrashBatch.
	FailCrashBatch = txnid.FailCrashBatch
)

// Config is one load-test run. DefaultConfig gives the documented defaults;
// Validate names the first bad field.
type Config struct {
	// Mode is ModeBroker (default) or ModeRaw.
	Mode report.Mode
	// Target is the broker to drive in ModeBroker: nats://host:port, or a
	// comma-separated list of a NATS cluster's servers (the
	// transport client, subject queen.v1.push) or http://host:port (POST
	// /api/v1/push). Default nats://127.0.0.1:4222.
	Target string
	// DatabaseURL is the broker's PostgreSQL: audited after a broker run
	// (read-only), written by a raw run. Required.
	DatabaseURL string

	// Producers is the number of concurrent producers, each with one request
	// in flight at a time (default 8, at least 1).
	Producers int
	// Connections is how many NATS connections the sync producers share,
	// round robin (default 0: one per producer, like independent clients;
	// 0..Producers). A Go program with many producing goroutines shares
	// one connection: a shared connection writes the requests of several
	// producers in one syscall. Only with a nats:// target and
	// ProducerMode sync.
	Connections int
	// Partitions is the number of partitions of the run's queue the items are
	// spread over, uniformly at random (default 64, 1..maxPartitions: the
	// 24 partition bits of an item's key).
	Partitions int
	// Spread is how new items pick their partition (default SpreadRandom):
	// SpreadRandom, uniformly at random (a fixed mix of producer and
	// sequence number); SpreadSequential, each producer walks the
	// partitions in order from its own start, so n new items touch
	// min(n, Partitions) distinct partitions (a run that must touch every
	// one of a million partitions).
	Spread string
	// Batch is the number of items per request (default 100, 1..10000). With
	// ProducerMode async it is the async producer's MaxBatchItems unless
	// MaxBatch is set, and 1 means single items batched up to 100.
	Batch int
	// ProducerMode is how producers send (default ProducerSync): sync
	// requests of Batch items, one in flight per producer; or async, single
	// items through the Go client's async producer (client.Producer),
	// which batches them and retries them with the same transactionIds.
	// Async needs a broker and no Chaos.
	ProducerMode string
	// InFlight bounds each async producer's outstanding items: published,
	// not yet resolved (its BufferItems; default 1000, 1..1,000,000).
	InFlight int
	// MaxBatch is the async producer's MaxBatchItems (default: Batch when
	// above 1, else 100; 1..10000).
	MaxBatch int
	// Linger is the async producer's Linger (default 5 ms; negative: none).
	Linger time.Duration
	// PayloadBytes is the size of each item's JSON payload in bytes (default
	// 200; the smallest payload is about 40 bytes).
	PayloadBytes int
	// DupRatio is the fraction of items that re-send a transactionId already
	// sent to the same partition, like a producer retrying after a timeout
	// (default 0.1, 0..1).
	DupRatio float64
	// Duration is how long new items are sent (default 30s). Retries of
	// failed items may continue for up to DrainTimeout after it.
	Duration time.Duration

	// Queue is the queue pushed to; default loadtest-<unix nanos> (a fresh
	// queue per run).
	Queue string
	// Table is the raw table (schema queen_raw) written in ModeRaw; default
	// loadtest_<unix nanos>, created fresh.
	Table string
	// DropTable drops the raw table after counting it (Compare sets it).
	DropTable bool

	// MaxAttempts bounds the sends of one item answered failed (or lost with
	// its request) before the producer gives up on it (default 8).
	MaxAttempts int
	// RequestTimeout bounds one request (default 30s); a timed-out request's
	// items are retried with the same transactionIds.
	RequestTimeout time.Duration
	// DrainTimeout bounds the retries of failed items after Duration
	// (default 15s).
	DrainTimeout time.Duration

	// Consumers is the number of consumers per consumer group (default 0:
	// no consume phase). Consumers long-poll the run's queue (any
	// partition) from the start, over the same target as the producers,
	// and keep going after the producers stop until every group's cursor
	// reaches every partition's last offset (or ConsumeDrainTimeout).
	Consumers int
	// Groups is the number of consumer groups, named <queue>-g0, -g1, ...
	// (default 1 when Consumers > 0).
	Groups int
	// FailRatio is the fraction of messages that are poison: chosen by a
	// hash of the transactionId, failed by the handler on every delivery,
	// so each must be delivered RetryLimit+1 times per group and land in
	// each group's DLQ once (default 0, 0..1).
	FailRatio float64
	// FailMode is how a consumer fails a poison message (default
	// FailNack): FailNack acks it failed, with the messages before it
	// completed in the same call, so the broker counts the failure at once;
	// FailCrash acks the messages before it completed and then abandons
	// the batch and its lease without acking the poison message or anything
	// after it, as a consumer that crashes on it would, so the broker
	// counts the failure when the lease expires (SPEC.md §4) and dead-letters
	// it with "lease expired"; FailCrashBatch acks nothing of a batch that
	// holds a poison message (a handler that acks its batch at the end), so
	// the broker bisects the redeliveries until the poison message expires
	// alone.
	FailMode string
	// ConsumeBatch is the most messages per pop (default 100, 1..10000).
	ConsumeBatch int
	// ConsumePartitions is the most partitions one pop may claim (the
	// pop's partitions=N, 1..100; 0 takes AutoConsumePartitions of the
	// run's partitions): above 1 a consumer's pop fills its batch at
	// several partitions in one request.
	ConsumePartitions int
	// RetryLimit is the queue's retryLimit, configured before the load
	// when Consumers > 0 (DefaultConfig: 3, the broker's default; 0..100).
	RetryLimit int
	// LeaseSeconds is the queue's leaseTime, configured with RetryLimit
	// (default 30 s; 2 s with FailCrash and FailCrashBatch, where every failed delivery waits
	// for its lease to expire, and a consumer must still pop, handle and ack
	// a batch within it on a busy machine): how long an unanswered ack
	// holds a span back.
	LeaseSeconds int
	// PollTimeout is the consumers' long-poll timeout (default 2s).
	PollTimeout time.Duration
	// ConsumeDrainTimeout bounds how long the consumption after the
	// producers stop may go without moving any group's cursor (default
	// 60s); running out of it fails the audit. A drain that keeps moving
	// is waited for.
	ConsumeDrainTimeout time.Duration
	// WakeProbes is how many rounds the wake-latency probe runs after the
	// consume phase (DefaultConfig: 50; 0: no probe): a long poll parks on a
	// fresh queue, one message is pushed, and the time from its commit to
	// the pop's reply is measured.
	WakeProbes int

	// Progress receives a progress line (nil: none). With ProgressLive the
	// line is rewritten in place about twice a second (a terminal);
	// otherwise a plain line is written every ProgressEvery (default 2s).
	Progress      io.Writer
	ProgressLive  bool
	ProgressEvery time.Duration
	// Label prefixes progress lines (Compare sets "round 2 broker").
	Label string

	// Targets, when it holds several HTTP URLs (the brokers of a
	// cluster), spreads the producers and consumers over them round robin;
	// a client whose broker fails in transport moves to the next one.
	// Target stays the first (the wake probe, the configure call).
	Targets []string

	// AdminToken, when not empty, is the bearer token the harness sends
	// (Authorization: Bearer) on every request, pushes, pops and acks
	// included: the brokers' QUEEN_ADMIN_TOKEN, which guards the configure
	// of the run's queue when it shortens the window or lowers retention
	// of an existing queue (README, Settings), or with JWT on (SPEC.md §14)
	// a JWT whose role allows what the run does (read-write; admin to
	// shorten the window or lower retention of an existing queue).
	// Default: none (queen loadtest passes --token, default
	// QUEEN_ADMIN_TOKEN).
	AdminToken string
	// Cluster, when set, is the cluster of broker processes the run drives
	// (chaos.StartCluster): the run watches its shard ownership, applies Chaos,
	// and reports both (Report.Cluster, Report.Chaos).
	Cluster *chaos.Cluster
	// Chaos is the faults injected while the producers run (Report.Chaos):
	// chaos.None ("" too); chaos.Kill (SIGKILL a random broker, restart it
	// after ChaosPause), chaos.Stop (SIGSTOP a random broker for ChaosPause,
	// then SIGCONT) and chaos.Mixed (one of each kind per round, in an order
	// drawn from ChaosSeed), which need Cluster; chaos.NATSKill (SIGKILL a
	// NATS node, restart it after ChaosPause), which needs Cluster with
	// NATSNodes at least 2; chaos.PGRestart (a fast
	// restart of the managed PostgreSQL on the same port), which needs
	// Cluster or RestartPostgres. The first fault comes half an interval
	// into the load, then one every ChaosInterval (default
	// chaos.DefaultInterval: 20 s for kill, 10 s for the others; with Cluster
	// at least twice the brokers' shard lease), none after Duration.
	Chaos         string
	ChaosInterval time.Duration
	// ChaosPause is how long a killed broker stays down, a stopped one
	// frozen and a killed NATS node down (default 1 s for a kill, 5 s for a
	// stop and a nats-kill; below the interval).
	ChaosPause time.Duration
	// ChaosSeed draws the brokers hit and (mixed) the order of the faults
	// (0: from the clock; the report gives the seed used).
	ChaosSeed uint64
	// RestartPostgres restarts the broker's PostgreSQL in place and returns
	// once it accepts connections again (chaos.PGRestart without Cluster:
	// --embedded passes the embedded broker's).
	RestartPostgres func(ctx context.Context) error

	// DedupWindow, when > 0, is configured as the queue's
	// dedupWindowSeconds before the load (whole seconds, at least 1s); 0
	// leaves the queue's default (3600 s, SPEC.md §6). Repeats are only
	// sent while their original is younger than a quarter of the window, and
	// failed items are retried only within half of it, so every repeat must
	// be answered duplicate.
	DedupWindow time.Duration
	// Retention, when > 0, is configured as the queue's retentionSeconds
	// (whole seconds): segments are deleted while the run goes on, so the
	// audit reads partitions' new segments during the run (every 2s, or
	// SampleEvery when shorter), before retention can delete them (at least
	// 30s and 4×SampleEvery; not with consumers).
	Retention time.Duration
	// SampleEvery is the timeline's interval (default 10s, at least 1s):
	// every SampleEvery the run records a point (Report.Timeline); its
	// stored/s is what the incremental audit read in the interval.
	SampleEvery time.Duration
	// MetricsURLs are the brokers' HTTP base URLs whose /metrics the
	// timeline reads (RSS, dedup cache); empty: the HTTP targets, if any.
	MetricsURLs []string
	// SelfRSS: the broker runs in this process (--embedded), so its RSS is
	// this process's, harness included.
	SelfRSS bool

	// AfterLoad, when set, runs after the load and before the audit or
	// count (tests use it to tamper with the database).
	AfterLoad func(ctx context.Context) error
}

// DefaultConfig returns the defaults of `queen loadtest`.
func DefaultConfig() Config {
	return Config{
		Mode:           report.ModeBroker,
		Target:         "nats://127.0.0.1:4222",
		Producers:      8,
		Partitions:     64,
		Batch:          100,
		PayloadBytes:   200,
		DupRatio:       0.1,
		Duration:       30 * time.Second,
		MaxAttempts:    8,
		RequestTimeout: 30 * time.Second,
		DrainTimeout:   15 * time.Second,
		ProgressEvery:  2 * time.Second,
		ConsumeBatch:   100,
		RetryLimit:     3,
		WakeProbes:     50,
		SampleEvery:    10 * time.Second,
		ProducerMode:   report.ProducerSync,
		Spread:         SpreadRandom,
		InFlight:       1000,
		Linger:         client.DefaultLinger,
	}
}

// maxBatch is the async producers' MaxBatchItems.
func (c *Config) maxBatch() int {
	switch {
	case c.MaxBatch > 0:
		return c.MaxBatch
	case c.Batch > 1:
		return c.Batch
	}
	return client.DefaultMaxBatchItems
}

// Validate checks cfg and returns an error naming the first bad field.
func (c *Config) Validate() error {
	switch {
	case c.Mode != report.ModeBroker && c.Mode != report.ModeRaw:
		return fmt.Errorf("mode %q: want broker or raw", c.Mode)
	case c.DatabaseURL == "":
		return errors.New("no database URL: pass --database-url, or run a managed broker that writes $QUEEN_DATA_DIR/postgres.url")
	case c.Producers < 1:
		return fmt.Errorf("producers %d: want at least 1", c.Producers)
	case c.Partitions < 1 || c.Partitions > txnid.MaxPartitions:
		return fmt.Errorf("partitions %d: want 1..%d", c.Partitions, txnid.MaxPartitions)
	case c.Batch < 1 || c.Batch > 10000:
		return fmt.Errorf("batch %d: want 1..10000 (the broker refuses larger requests)", c.Batch)
	case c.PayloadBytes < 0:
		return fmt.Errorf("payload bytes %d: want at least 0", c.PayloadBytes)
	case c.DupRatio < 0 || c.DupRatio > 1:
		return fmt.Errorf("dup ratio %g: want 0..1", c.DupRatio)
	case c.Duration <= 0:
		return fmt.Errorf("duration %s: want > 0", c.Duration)
	case c.MaxAttempts < 1 || c.MaxAttempts > 255:
		return fmt.Errorf("max attempts %d: want 1..255", c.MaxAttempts)
	case c.Producers > txnid.MaxProducers:
		return fmt.Errorf("producers %d: want at most %d", c.Producers, txnid.MaxProducers)
	case c.Consumers < 0 || c.Consumers > 1024:
		return fmt.Errorf("consumers %d: want 0..1024 per group", c.Consumers)
	case c.Consumers > 0 && c.Mode != report.ModeBroker:
		return errors.New("consumers need a broker (mode broker)")
	case c.Groups < 0 || c.Groups > 64:
		return fmt.Errorf("groups %d: want 1..64", c.Groups)
	case c.Groups > 0 && c.Consumers == 0:
		return fmt.Errorf("groups %d without consumers: pass --consumers", c.Groups)
	case c.FailRatio < 0 || c.FailRatio > 1:
		return fmt.Errorf("fail ratio %g: want 0..1", c.FailRatio)
	case c.FailRatio > 0 && c.Consumers == 0:
		return fmt.Errorf("fail ratio %g without consumers: pass --consumers", c.FailRatio)
	case c.Consumers > 0 && (c.ConsumeBatch < 1 || c.ConsumeBatch > 10000):
		return fmt.Errorf("consume batch %d: want 1..10000", c.ConsumeBatch)
	case c.Consumers > 0 && (c.ConsumePartitions < 0 || c.ConsumePartitions > 100):
		return fmt.Errorf("consume partitions %d: want 1..100", c.ConsumePartitions)
	case c.FailMode != "" && c.FailMode != FailNack && !txnid.Crashes(c.FailMode):
		return fmt.Errorf("fail mode %q: want nack, crash or crash-batch", c.FailMode)
	case c.RetryLimit < 0 || c.RetryLimit > 100:
		return fmt.Errorf("retry limit %d: want 0..100", c.RetryLimit)
	case c.WakeProbes < 0 || c.WakeProbes > 10000:
		return fmt.Errorf("wake probes %d: want 0..10000", c.WakeProbes)
	case c.DedupWindow < 0 || c.DedupWindow%time.Second != 0 || (c.DedupWindow > 0 && c.DedupWindow < time.Second):
		return fmt.Errorf("dedup window %s: want whole seconds, at least 1s (0: the queue's default)", c.DedupWindow)
	case c.Retention < 0 || c.Retention%time.Second != 0:
		return fmt.Errorf("retention %s: want whole seconds (0: keep)", c.Retention)
	case c.SampleEvery < time.Second:
		return fmt.Errorf("sample every %s: want at least 1s", c.SampleEvery)
	case c.Retention > 0 && (c.Retention < 30*time.Second || c.Retention < 4*c.SampleEvery):
		return fmt.Errorf("retention %s: want at least 30s and 4 × --sample-every (%s), so the audit reads new segments before retention deletes them", c.Retention, c.SampleEvery)
	case c.Retention > 0 && c.Mode != report.ModeBroker:
		return errors.New("retention needs a broker (mode broker)")
	case c.Spread != SpreadRandom && c.Spread != SpreadSequential:
		return fmt.Errorf("spread %q: want %s or %s", c.Spread, SpreadRandom, SpreadSequential)
	case c.ProducerMode != report.ProducerSync && c.ProducerMode != report.ProducerAsync:
		return fmt.Errorf("producer mode %q: want sync or async", c.ProducerMode)
	case c.ProducerMode == report.ProducerAsync && c.Mode != report.ModeBroker:
		return errors.New("producer mode async needs a broker (mode broker)")
	case c.ProducerMode == report.ProducerAsync && chaos.On(c.Chaos):
		return errors.New("producer mode async with chaos: not supported yet (the chaos report counts sync requests); drop --chaos or use --producer-mode sync")
	case c.InFlight < 1 || c.InFlight > 1_000_000:
		return fmt.Errorf("in flight %d: want 1..1000000", c.InFlight)
	case c.Connections < 0 || c.Connections > c.Producers:
		return fmt.Errorf("connections %d: want 0..%d (--producers; 0: one per producer)", c.Connections, c.Producers)
	case c.Connections > 0 && c.ProducerMode != report.ProducerSync:
		return errors.New("connections with producer mode async: each async producer has its own connection; drop --connections")
	case c.MaxBatch < 0 || c.MaxBatch > 10000:
		return fmt.Errorf("max batch %d: want 1..10000 (0: --batch, or 100 when --batch is 1)", c.MaxBatch)
	}
	if err := c.validateChaos(); err != nil {
		return err
	}
	if c.Mode == report.ModeBroker {
		if strings.HasPrefix(c.Target, "nats://") {
			// One NATS server or several of a cluster, comma-separated
			// (SPEC.md §9).
			if _, err := client.ParseNATSURLs(c.Target); err != nil {
				return fmt.Errorf("target: %w", err)
			}
			return nil
		}
		u, err := url.Parse(c.Target)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("target %q: want nats://host:port (or several, comma-separated) or http://host:port", c.Target)
		}
		if c.Connections > 0 && u.Scheme != "nats" {
			return fmt.Errorf("connections %d with target %q: shared connections are NATS connections; use a nats:// target or drop --connections", c.Connections, c.Target)
		}
	}
	return nil
}

// validateChaos checks the chaos settings (after withDefaults): a known
// mode, a broker to hit, then chaos.Config.Validate.
func (c *Config) validateChaos() error {
	if !chaos.On(c.Chaos) {
		return nil
	}
	if err := chaos.CheckMode(c.Chaos); err != nil {
		return err
	}
	if c.Mode != report.ModeBroker {
		return fmt.Errorf("chaos %s needs a broker (mode broker)", c.Chaos)
	}
	cc := c.chaosConfig()
	return cc.Validate()
}

// chaosConfig is the chaos room's share of c.
func (c *Config) chaosConfig() chaos.Config {
	return chaos.Config{Mode: c.Chaos, Interval: c.ChaosInterval, Pause: c.ChaosPause, Seed: c.ChaosSeed,
		Cluster: c.Cluster, RestartPostgres: c.RestartPostgres, Duration: c.Duration,
		RequestTimeout: c.RequestTimeout, Progress: c.Progress}
}

// produceConfig is the producers' share of c (after withDefaults).
func (c *Config) produceConfig() produce.Config {
	return produce.Config{Queue: c.Queue, Batch: c.Batch, PayloadBytes: c.PayloadBytes, DupRatio: c.DupRatio,
		MaxAttempts: c.MaxAttempts, RequestTimeout: c.RequestTimeout, Sequential: c.Spread == SpreadSequential,
		Window: c.window(), Linger: c.Linger, MaxBatch: c.maxBatch(), InFlight: c.InFlight}
}

// consumersConfig is the consumers' share of c (after withDefaults).
func (c *Config) consumersConfig() consumers.Config {
	return consumers.Config{Queue: c.Queue, Target: c.Target, Targets: c.Targets, AdminToken: c.AdminToken,
		Chaos: chaos.On(c.Chaos), RequestTimeout: c.RequestTimeout, Consumers: c.Consumers, Groups: c.Groups,
		FailRatio: c.FailRatio, FailMode: c.FailMode, ConsumeBatch: c.ConsumeBatch, ConsumePartitions: c.ConsumePartitions,
		RetryLimit: c.RetryLimit, LeaseSeconds: c.LeaseSeconds, PollTimeout: c.PollTimeout,
		ConsumeDrainTimeout: c.ConsumeDrainTimeout, WakeProbes: c.WakeProbes, MetricsURLs: c.MetricsURLs}
}

// The values of Config.Spread.
const (
	SpreadRandom     = "random"
	SpreadSequential = "sequential"
)

// withDefaults fills the zero-valued tuning fields.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.Mode == "" {
		c.Mode = d.Mode
	}
	if c.ProducerMode == "" {
		c.ProducerMode = d.ProducerMode
	}
	if c.Spread == "" {
		c.Spread = d.Spread
	}
	if c.InFlight == 0 {
		c.InFlight = d.InFlight
	}
	if c.Linger == 0 {
		c.Linger = d.Linger
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = d.MaxAttempts
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = d.RequestTimeout
	}
	if c.DrainTimeout <= 0 {
		c.DrainTimeout = d.DrainTimeout
	}
	if c.ProgressEvery <= 0 {
		c.ProgressEvery = d.ProgressEvery
	}
	if c.Consumers > 0 && c.Groups == 0 {
		c.Groups = 1
	}
	if c.ConsumeBatch == 0 {
		c.ConsumeBatch = d.ConsumeBatch
	}
	if c.ConsumePartitions == 0 {
		c.ConsumePartitions = AutoConsumePartitions(c.Partitions)
	}
	if c.FailMode == "" {
		c.FailMode = FailNack
	}
	if c.LeaseSeconds <= 0 {
		c.LeaseSeconds = consumers.DefaultLease(c.FailMode)
	}
	if c.PollTimeout <= 0 {
		c.PollTimeout = 2 * time.Second
	}
	if chaos.On(c.Chaos) && c.ChaosInterval <= 0 {
		c.ChaosInterval = chaos.DefaultInterval(c.Chaos)
	}
	if c.SampleEvery == 0 {
		c.SampleEvery = d.SampleEvery
	}
	if c.ConsumeDrainTimeout <= 0 {
		c.ConsumeDrainTimeout = 60 * time.Second
	}
	now := time.Now().UnixNano()
	if c.Queue == "" {
		c.Queue = fmt.Sprintf("loadtest-%d", now)
	}
	if c.Table == "" {
		c.Table = fmt.Sprintf("loadtest_%d", now)
	}
	return c
}

// window is the run queue's dedup window: DedupWindow, else the default.
func (c *Config) window() time.Duration {
	if c.DedupWindow > 0 {
		return c.DedupWindow
	}
	return 3600 * time.Second
}

// AutoConsumePartitions is the harness's default partitions=N for a queue
// of partitions partitions: 1 up to 127 partitions, then one more per 64
// partitions, at most 32. A pop over many partitions pays off when each
// holds few messages (the spread of a batch of pushes over thousands of
// partitions); over few busy partitions one partition's span fills a
// batch and N > 1 only reads more.
func AutoConsumePartitions(partitions int) int {
	return min(max(partitions/64, 1), 32)
}
