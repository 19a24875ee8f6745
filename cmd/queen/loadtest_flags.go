package main

import (
	"os"
	"time"

	"github.com/spf13/pflag"

	"github.com/queen-mq/queen-go/loadtest"
	"github.com/queen-mq/queen-go/loadtest/chaos"
	"github.com/queen-mq/queen-go/loadtest/consumers"
)

// runFlags: what to drive, how long, and what to print.
func (lf *loadtestFlags) runFlags(f *pflag.FlagSet) {
	f.StringVar(&lf.cfg.Target, "target", lf.cfg.Target, "broker to drive: nats://host:port (or a comma-separated list of a NATS cluster's servers) or http://host:port (default as queen push: env NATS_URL, else nats://<QUEEN_NATS_LISTEN>, else nats://127.0.0.1:4222); with --embedded only its scheme counts")
	f.StringVar(&lf.cfg.DatabaseURL, "database-url", "", "the broker's PostgreSQL, for the audit and --mode raw (default: $QUEEN_DATA_DIR/postgres.url, then DATABASE_URL)")
	f.StringVar(&lf.mode, "mode", string(loadtest.ModeBroker), "broker, or raw: COPY the same batches straight into PostgreSQL (the baseline)")
	f.DurationVar(&lf.cfg.Duration, "duration", lf.cfg.Duration, "how long to send new items (per round with --compare)")
	f.BoolVar(&lf.out.json, "json", false, "print the report as one JSON object on stdout")
	f.StringVar(&lf.out.reportFile, "report", "", "also write the report as one self-contained HTML page to this file: the settings, the summary and charts of the timeline with the faults marked (created before the run, written after it, also when an audit fails)")
	f.BoolVar(&lf.embedded, "embedded", false, "start a broker in-process (embedded NATS, managed PostgreSQL) in a temporary folder and drive it")
	f.BoolVar(&lf.compare, "compare", false, "run broker and raw alternately, three rounds each, and print the median ratio of stored messages/s")
	f.StringVar(&lf.pgBin, "pg-bin", os.Getenv("QUEEN_PG_BIN"), "PostgreSQL binaries for --embedded (env QUEEN_PG_BIN)")
	f.StringVar(&lf.out.cpuProfile, "cpuprofile", "", "write a CPU profile of this process during the load to this file (go tool pprof); with --embedded it covers the broker")
	f.DurationVar(&lf.cfg.RequestTimeout, "request-timeout", 30*time.Second, "bound of one request; a timed-out request's items are retried with the same transactionIds (default 5s with --chaos)")
	f.StringVar(&lf.cfg.AdminToken, "token", os.Getenv("QUEEN_ADMIN_TOKEN"), "bearer token sent as Authorization: Bearer on every request of the run: a JWT with a read-write role (admin to shorten the window or lower retention of an existing queue) for brokers with JWT on, or the brokers' QUEEN_ADMIN_TOKEN, which guards that configure (env QUEEN_ADMIN_TOKEN)")
	lf.tls.registerCert(f)
	f.StringVar(&lf.tls.caFile, "ca-file", os.Getenv("QUEEN_CA_FILE"), "PEM CA to trust for an https:// target, or a nats:// target whose server requires TLS, besides the system's roots (env QUEEN_CA_FILE)")
	f.StringVar(&lf.natsCreds, "nats-creds", os.Getenv("NATS_CREDS"), "NATS credentials file (user JWT and nkey seed) of the run's NATS connections (env NATS_CREDS)")
	f.StringVar(&lf.natsNkey, "nats-nkey", os.Getenv("NATS_NKEY"), "file holding the NATS user nkey seed of the run's NATS connections (env NATS_NKEY)")
	f.StringVar(&lf.natsUser, "nats-user", os.Getenv("NATS_USER"), "NATS user of the run's NATS connections; its password from env NATS_PASSWORD (env NATS_USER)")
	f.StringVar(&lf.logLevel, "log-level", envOr("QUEEN_LOG_LEVEL", "warn"), "log level of the --embedded broker: debug, info, warn, error")
}

// produceFlags: the producers and the items they send, the fields of cfg
// that fill the produce room's config (loadtest/produce).
func produceFlags(f *pflag.FlagSet, cfg *loadtest.Config) {
	f.IntVar(&cfg.Producers, "producers", cfg.Producers, "concurrent producers, one request in flight each")
	f.IntVar(&cfg.Connections, "connections", 0, "NATS connections the sync producers share, round robin (0: one per producer, like independent clients)")
	f.IntVar(&cfg.Partitions, "partitions", cfg.Partitions, "partitions of the run's queue")
	f.StringVar(&cfg.Spread, "spread", cfg.Spread, "how new items pick their partition: random, or sequential (each producer walks the partitions in order, so n new items touch min(n, --partitions) distinct partitions)")
	f.IntVar(&cfg.Batch, "batch", cfg.Batch, "items per request")
	f.StringVar(&cfg.ProducerMode, "producer-mode", cfg.ProducerMode, "sync: requests of --batch items, one in flight per producer; async: single items through the client's async producer")
	f.IntVar(&cfg.InFlight, "in-flight", cfg.InFlight, "with --producer-mode async: most outstanding (published, unresolved) items per producer")
	f.IntVar(&cfg.MaxBatch, "max-batch", 0, "with --producer-mode async: most items per request (0: --batch, or 100 when --batch is 1)")
	f.DurationVar(&cfg.Linger, "linger", cfg.Linger, "with --producer-mode async: how long an item waits for others to share its request")
	f.IntVar(&cfg.PayloadBytes, "payload-bytes", cfg.PayloadBytes, "JSON payload size per item in bytes")
	f.Float64Var(&cfg.DupRatio, "dup-ratio", cfg.DupRatio, "fraction of items that re-send a transactionId already sent to the same partition")
}

// consumersFlags: the consume phase and its poison messages, bound into the
// consumers room's settings (loadtest/consumers), which loadtest.Config
// embeds.
func consumersFlags(f *pflag.FlagSet, cfg *consumers.Consumption) {
	f.IntVar(&cfg.Consumers, "consumers", cfg.Consumers, "consumers per consumer group (0: no consume phase)")
	f.IntVar(&cfg.Groups, "groups", cfg.Groups, "consumer groups, named <queue>-g0, -g1, ... (default 1 with --consumers)")
	f.Float64Var(&cfg.FailRatio, "fail-ratio", cfg.FailRatio, "fraction of messages whose every delivery the consumers fail (chosen by a hash of the transactionId)")
	f.StringVar(&cfg.FailMode, "fail-mode", loadtest.FailNack, "how consumers fail a poison message: nack (ack it failed), crash (ack the messages before it, never ack it, abandon the lease) or crash-batch (handle the whole batch, ack nothing, abandon the lease); the crash modes take leaseTime 2 s unless --consume-lease")
	f.IntVar(&cfg.ConsumeBatch, "consume-batch", cfg.ConsumeBatch, "most messages per pop")
	f.IntVar(&cfg.ConsumePartitions, "consume-partitions", cfg.ConsumePartitions, "most partitions one pop may claim (the pop's partitions=N, 1..100): a pop fills its batch at several partitions in one request; 0 (the default): 1 up to 127 partitions, one per 64 partitions above, at most 32")
	f.IntVar(&cfg.RetryLimit, "retry-limit", cfg.RetryLimit, "the queue's retryLimit, configured before the load when consuming")
	f.DurationVar(&cfg.ConsumeDrainTimeout, "drain-timeout", 60*time.Second, "after the producers stop, how long the consumers may go without moving any cursor before the run fails")
	f.IntVar(&cfg.WakeProbes, "wake-probes", cfg.WakeProbes, "rounds of the wake-latency probe after the consume phase (0: none)")
	f.IntVar(&cfg.LeaseSeconds, "consume-lease", 30, "the queue's leaseTime in seconds when consuming: how long a lost pop reply or ack holds its messages back (default 2 with --fail-mode crash)")
}

// chaosFlags: the chaos room's (loadtest/chaos) — broker processes of this
// binary, their NATS cluster and PostgreSQL standby, bound into cl (its
// ClusterConfig), and the faults injected into them, bound into fa
// (loadtest.Config's Chaos).
func chaosFlags(f *pflag.FlagSet, fa *chaos.Faults, cl *chaos.ClusterConfig) {
	f.IntVar(&cl.Brokers, "brokers", 0, "start this many broker processes sharing one managed PostgreSQL and one NATS server, and drive them (0: none)")
	f.StringVar(&fa.Mode, "chaos", chaos.None, "faults during the load: none; with --brokers kill (SIGKILL a random broker, restart it), stop (SIGSTOP a random broker, SIGCONT after --chaos-pause) or mixed (one of each per round, with nats-kill when --nats-nodes is 2 or more, and pg-failover once with --pg-standby); pg-restart (fast restart of the managed PostgreSQL) with --brokers or --embedded; pg-failover (SIGKILL the PostgreSQL primary, promote its standby) with --brokers N --pg-standby; nats-kill (SIGKILL a NATS node in turn, restart it after --chaos-pause) with --brokers N --nats-nodes M (M at least 2)")
	f.IntVar(&cl.NATSNodes, "nats-nodes", 0, "with --brokers: run the NATS server as a cluster of this many node processes routed on loopback (0: one NATS server in this process); brokers and clients get every node's URL")
	f.BoolVar(&cl.PGStandby, "pg-standby", false, "with --brokers: give the managed PostgreSQL a synchronous streaming standby on loopback; the brokers' DATABASE_URL lists both servers (target_session_attrs=read-write)")
	f.DurationVar(&fa.Interval, "chaos-interval", 0, "time between faults, the first half of it into the load (default 20s for kill, 10s for the others; with --brokers at least twice --shard-lease)")
	f.DurationVar(&fa.Pause, "chaos-pause", 0, "how long a killed broker stays down before its restart (default 1s), a stopped one frozen before SIGCONT (default 5s) and a killed NATS node down before its restart (default 5s)")
	f.Uint64Var(&fa.Seed, "chaos-seed", 0, "seed of the brokers hit and of mixed's order of faults (0: from the clock; the report gives it)")
	f.DurationVar(&cl.Lease, "shard-lease", 0, "with --brokers: the brokers' QUEEN_SHARD_LEASE (default 5s with --chaos, else the brokers' default)")
}

// timelineFlags: the timeline, retention and the dedup window of long runs
// (the run's own, loadtest).
func timelineFlags(f *pflag.FlagSet, cfg *loadtest.Config) {
	f.DurationVar(&cfg.DedupWindow, "dedup-window", 0, "configure the run's queue with this dedupWindowSeconds (whole seconds; 0: the queue's default, 1h)")
	f.DurationVar(&cfg.Retention, "retention", 0, "configure the run's queue with this retentionSeconds (whole seconds, at least 30s and 4 × --sample-every; 0: keep); the audit then runs during the run")
	f.DurationVar(&cfg.SampleEvery, "sample-every", cfg.SampleEvery, "interval of the timeline (and of the incremental audit passes)")
	f.StringSliceVar(&cfg.MetricsURLs, "metrics-url", nil, "brokers' HTTP base URLs whose /metrics the timeline reads (default: the HTTP target, the --embedded broker, the --brokers N brokers)")
}
