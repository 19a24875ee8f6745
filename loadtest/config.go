package loadtest

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

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
	// ProducerMode is how producers send (default ProducerSync): sync
	// requests of Batch items, one in flight per producer; or async, single
	// items through the Go client's async producer (client.Producer),
	// which batches them and retries them with the same transactionIds.
	// Async needs a broker and no Chaos.
	ProducerMode string
	// Duration is how long new items are sent (default 30s). Retries of
	// failed items may continue for up to DrainTimeout after it.
	Duration time.Duration
	// Load is the producers' own settings (loadtest/produce): Batch,
	// PayloadBytes, DupRatio, MaxAttempts and the async producer's Linger,
	// MaxBatch and InFlight, promoted here.
	produce.Load

	// Queue is the queue pushed to; default loadtest-<unix nanos> (a fresh
	// queue per run).
	Queue string
	// Table is the raw table (schema queen_raw) written in ModeRaw; default
	// loadtest_<unix nanos>, created fresh.
	Table string
	// DropTable drops the raw table after counting it (Compare sets it).
	DropTable bool

	// RequestTimeout bounds one request (default 30s); a timed-out request's
	// items are retried with the same transactionIds.
	RequestTimeout time.Duration
	// DrainTimeout bounds the retries of failed items after Duration
	// (default 15s).
	DrainTimeout time.Duration

	// Consumption is the consume phase's own settings (loadtest/consumers):
	// Consumers (default 0: no consume phase), Groups, FailRatio, FailMode,
	// ConsumeBatch, ConsumePartitions, RetryLimit, LeaseSeconds,
	// PollTimeout, ConsumeDrainTimeout and WakeProbes, promoted here.
	consumers.Consumption

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

	// TLS, when not nil, is the TLS configuration of https:// targets
	// (queen loadtest --ca-file: client.TrustCA); nil: the system's roots.
	TLS *tls.Config

	// NATSOptions are more options of every NATS connection of the
	// harness (queen loadtest --nats-creds, --nats-nkey, --nats-user and
	// --ca-file for a nats:// target: client.NATSAuth.Options); nil: none.
	NATSOptions []nats.Option

	// Chaos is the faults injected while the producers run and the cluster
	// of broker processes they hit (loadtest/chaos, Report.Chaos and
	// Report.Cluster): Chaos.Mode (chaos.None, "" too, by default), its
	// Interval, Pause and Seed, the Cluster the run drives and watches, and
	// RestartPostgres. Not promoted: its fields are named for the chaos
	// room (Mode, Interval), not for the run.
	Chaos chaos.Faults

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
	// 30s and 4×SampleEvery). With consumers, a message retention deleted
	// before a group acked it counts in that group's expired_before_acked
	// (the consume audit), not as lost.
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
		Duration:       30 * time.Second,
		RequestTimeout: 30 * time.Second,
		DrainTimeout:   15 * time.Second,
		ProgressEvery:  2 * time.Second,
		SampleEvery:    10 * time.Second,
		ProducerMode:   report.ProducerSync,
		Spread:         SpreadRandom,
		Load: produce.Load{
			Batch:        100,
			PayloadBytes: 200,
			DupRatio:     0.1,
			MaxAttempts:  8,
			InFlight:     1000,
			Linger:       client.DefaultLinger,
		},
		Consumption: consumers.Consumption{
			ConsumeBatch: 100,
			RetryLimit:   3,
			WakeProbes:   50,
		},
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
	case c.ProducerMode == report.ProducerAsync && chaos.On(c.Chaos.Mode):
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
	if !chaos.On(c.Chaos.Mode) {
		return nil
	}
	if err := chaos.CheckMode(c.Chaos.Mode); err != nil {
		return err
	}
	if c.Mode != report.ModeBroker {
		return fmt.Errorf("chaos %s needs a broker (mode broker)", c.Chaos.Mode)
	}
	cc := c.chaosConfig()
	return cc.Validate()
}

// chaosConfig is the chaos room's share of c: its Faults, and the run's
// duration, request timeout and progress.
func (c *Config) chaosConfig() chaos.Config {
	return chaos.Config{Faults: c.Chaos, Duration: c.Duration, RequestTimeout: c.RequestTimeout, Progress: c.Progress}
}

// produceConfig is the producers' share of c (after withDefaults): their
// Load, with MaxBatch resolved, and what the run derives for them.
func (c *Config) produceConfig() produce.Config {
	pc := produce.Config{Load: c.Load, Queue: c.Queue, RequestTimeout: c.RequestTimeout,
		Sequential: c.Spread == SpreadSequential, Window: c.window()}
	pc.MaxBatch = c.maxBatch()
	return pc
}

// consumersConfig is the consumers' share of c (after withDefaults): their
// Consumption, and the run's queue, targets and timeouts.
func (c *Config) consumersConfig() consumers.Config {
	return consumers.Config{Consumption: c.Consumption, Queue: c.Queue, Target: c.Target, Targets: c.Targets,
		AdminToken: c.AdminToken, TLS: c.TLS, NATSOptions: c.NATSOptions, Chaos: chaos.On(c.Chaos.Mode), RequestTimeout: c.RequestTimeout, MetricsURLs: c.MetricsURLs}
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
	if chaos.On(c.Chaos.Mode) && c.Chaos.Interval <= 0 {
		c.Chaos.Interval = chaos.DefaultInterval(c.Chaos.Mode)
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
