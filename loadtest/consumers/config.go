package consumers

import (
	"crypto/tls"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/queen-mq/queen-go/loadtest/txnid"
)

// Config is the consumers' share of a run: their Consumption, which
// loadtest.Config embeds (the flags of queen loadtest set it, its
// withDefaults fills it and its Validate checks the ranges), and what the
// run gives them.
type Config struct {
	Consumption
	// Queue is the run's queue; the groups are <Queue>-g0, -g1, ... and the
	// wake probe's queue <Queue>-probe.
	Queue string
	// Target is the broker the clients reach (nats://... or http://...),
	// Targets the HTTP brokers of a cluster the consumers spread over
	// (several: round robin with failover), AdminToken the bearer token
	// sent on every request (target.NewConsumeClient).
	Target     string
	Targets    []string
	AdminToken string
	// TLS is the TLS configuration of https:// targets (nil: the
	// system's roots; loadtest.Config.TLS).
	TLS *tls.Config
	// NATSOptions are more options of the clients' NATS connections (the
	// credentials and CA; loadtest.Config.NATSOptions).
	NATSOptions []nats.Option
	// Chaos: faults are injected during the run (chaos.On), so a NATS pop
	// gives up after min(10 s, RequestTimeout) as a push would.
	Chaos bool
	// RequestTimeout bounds one configure call (and, with Chaos, a pop).
	RequestTimeout time.Duration
	// MetricsURLs are the brokers' HTTP base URLs whose lease figures the
	// poison report reads (target.ScrapeMetrics; empty: none).
	MetricsURLs []string
}

// Consumption is how a run consumes: the fields of loadtest.Config that are
// the consume phase's own (it embeds Consumption), and of its Config. The
// defaults named are loadtest.DefaultConfig's and its withDefaults'.
type Consumption struct {
	// Consumers is the number of consumers per consumer group (default 0:
	// no consume phase; 0..1024). Consumers long-poll the run's queue (any
	// partition) from the start, over the same target as the producers,
	// and keep going after the producers stop until every group's cursor
	// reaches every partition's last offset (or ConsumeDrainTimeout).
	Consumers int
	// Groups is the number of consumer groups, named <queue>-g0, -g1, ...
	// (default 1 when Consumers > 0; 1..64).
	Groups int
	// FailRatio is the fraction of messages that are poison
	// (txnid.IsPoison: chosen by a hash of the transactionId), failed by
	// the handler on every delivery, so each must be delivered
	// RetryLimit+1 times per group and land in each group's DLQ once
	// (default 0, 0..1).
	FailRatio float64
	// FailMode is how a consumer fails a poison message (default
	// txnid.FailNack): FailNack acks it failed, with the messages before it
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
	// pop's partitions=N, 1..100; 0 takes loadtest.AutoConsumePartitions
	// of the run's partitions): above 1 a consumer's pop fills its batch at
	// several partitions in one request.
	ConsumePartitions int
	// RetryLimit is the queue's retryLimit, configured before the load
	// when Consumers > 0 (default 3, the broker's default; 0..100).
	RetryLimit int
	// LeaseSeconds is the queue's leaseTime, configured with RetryLimit
	// (default DefaultLease(FailMode): 30 s; 2 s with FailCrash and
	// FailCrashBatch, where every failed delivery waits for its lease to
	// expire, and a consumer must still pop, handle and ack a batch within
	// it on a busy machine): how long an unanswered ack holds a span back.
	LeaseSeconds int
	// PollTimeout is the consumers' long-poll timeout (default 2s).
	PollTimeout time.Duration
	// ConsumeDrainTimeout bounds how long the consumption after the
	// producers stop may go without moving any group's cursor (default
	// 60s); running out of it fails the audit. A drain that keeps moving
	// is waited for.
	ConsumeDrainTimeout time.Duration
	// WakeProbes is how many rounds the wake-latency probe runs after the
	// consume phase (default 50; 0: no probe): a long poll parks on a
	// fresh queue, one message is pushed, and the time from its commit to
	// the pop's reply is measured.
	WakeProbes int
}

// DefaultLease is the lease (seconds) a run configures for failMode: 30,
// or 2 with the crash modes, where every failed delivery waits for its
// lease to expire and a consumer must still pop, handle and ack a batch
// within it on a busy machine.
func DefaultLease(failMode string) int {
	if txnid.Crashes(failMode) {
		return 2
	}
	return 30
}
