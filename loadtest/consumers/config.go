package consumers

import (
	"time"

	"github.com/queen-mq/queen-go/loadtest/txnid"
)

// Config is the consumers' share of a run (loadtest.Config fills it, with
// its defaults; loadtest.Config's Validate checks the ranges).
type Config struct {
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
	// Chaos: faults are injected during the run (chaos.On), so a NATS pop
	// gives up after min(10 s, RequestTimeout) as a push would.
	Chaos bool
	// RequestTimeout bounds one configure call (and, with Chaos, a pop).
	RequestTimeout time.Duration

	// Consumers per group (0..1024) and Groups (1..64).
	Consumers, Groups int
	// FailRatio is the fraction of poison messages (txnid.IsPoison, 0..1);
	// FailMode how a consumer fails one (txnid.FailNack, FailCrash,
	// FailCrashBatch).
	FailRatio float64
	FailMode  string
	// ConsumeBatch is the most messages per pop (1..10000),
	// ConsumePartitions the most partitions one pop may claim (1..100).
	ConsumeBatch, ConsumePartitions int
	// RetryLimit (0..100) and LeaseSeconds (seconds; DefaultLease) are
	// configured on the queue before the load (QueueOptions).
	RetryLimit, LeaseSeconds int
	// PollTimeout is the long-poll timeout; ConsumeDrainTimeout how long
	// the drain may go without any cursor moving.
	PollTimeout, ConsumeDrainTimeout time.Duration
	// WakeProbes is the wake probe's rounds (0: none).
	WakeProbes int
	// MetricsURLs are the brokers' HTTP base URLs whose lease figures the
	// poison report reads (target.ScrapeMetrics; empty: none).
	MetricsURLs []string
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
