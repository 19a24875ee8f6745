// Package metrics holds the broker's Prometheus metrics: one registry, served at
// GET /metrics, shared by the partition actors, the transports and the wiring
// in cmd/queen (which adds the cache, partition and cluster gauges to it).
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Set is the broker's Prometheus metrics, registered on their own
// registry (served at GET /metrics).
type Set struct {
	Registry *prometheus.Registry
	// PushRequests counts push requests by transport ("http", "nats").
	PushRequests *prometheus.CounterVec
	// PushItems counts push items by verdict.
	PushItems *prometheus.CounterVec
	// DedupPayloadMismatch counts duplicates answered with payloadMismatch
	// (queues with dedupCheckPayload, SPEC.md §6), by queue, on the broker
	// the push entered.
	DedupPayloadMismatch *prometheus.CounterVec
	// QueueItems counts push items by queue and verdict ("queued",
	// "duplicate", "failed"), on the broker the push entered; the queue
	// listing's duplicate rate reads it. One label set per queue and verdict
	// (never per partition); a deleted queue's series are removed.
	QueueItems *prometheus.CounterVec
	// Commits counts push transactions committed (or attempted) by partition actors.
	Commits prometheus.Counter
	// CommitSeconds is the latency of one push transaction, seconds.
	CommitSeconds prometheus.Histogram
	// FusedRequests is the number of push requests fused into one commit.
	FusedRequests prometheus.Histogram
	// MailboxDepth is the number of push items waiting in partition actors' mailboxes.
	MailboxDepth prometheus.Gauge
	// Overloads counts push requests refused because a mailbox was full.
	Overloads prometheus.Counter
	// PollsRefused counts long polls refused over a cap (429 too_many_polls).
	PollsRefused prometheus.Counter
	// StalledBodies counts HTTP push and transaction bodies cut off because
	// nothing of them arrived for the body idle timeout (408 body_stalled).
	StalledBodies prometheus.Counter
	// PopMessages counts messages returned by pops.
	PopMessages prometheus.Counter
	// AckItems counts ack items by result.
	AckItems *prometheus.CounterVec
	// TracesDiscarded counts POST /api/v1/traces events accepted and not kept.
	TracesDiscarded prometheus.Counter
	// LockWaitSeconds is how long row locks took to be granted, seconds, by
	// op: "push" (a bundle's partition rows), "ack" (a consumer row),
	// "transaction" (a transaction's partition rows). A wait cut off by the
	// lock timeout (QUEEN_LOCK_TIMEOUT) is observed too.
	LockWaitSeconds *prometheus.HistogramVec
	// LockTimeouts counts lock waits cut off by the lock timeout
	// (QUEEN_LOCK_TIMEOUT; code lock_timeout), by op as LockWaitSeconds.
	LockTimeouts *prometheus.CounterVec
	// PushMoved counts push transactions run again because a partition
	// its actor knew had been moved by another writer (or had lost its
	// allocator row to a crash) when its row lock was taken at the
	// allocator's bump: nothing was written by the first attempt.
	PushMoved prometheus.Counter
}

// New creates and registers the metrics, with Go and process collectors.
func New() *Set {
	r := prometheus.NewRegistry()
	m := &Set{
		Registry: r,
		PushRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "queen_push_requests_total", Help: "Push requests received, by transport.",
		}, []string{"transport"}),
		PushItems: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "queen_push_items_total", Help: "Push items answered, by verdict.",
		}, []string{"verdict"}),
		QueueItems: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "queen_queue_push_items_total", Help: "Push items answered, by queue and verdict (queued, duplicate, failed), on the broker the push entered.",
		}, []string{"queue", "verdict"}),
		DedupPayloadMismatch: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "queen_dedup_payload_mismatch_total", Help: "Duplicates whose payload differs from the original's (queues with dedupCheckPayload), by queue.",
		}, []string{"queue"}),
		Commits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "queen_push_commits_total", Help: "Push transactions run by partition actors.",
		}),
		CommitSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "queen_push_commit_seconds", Help: "Latency of one push transaction.",
			Buckets: prometheus.ExponentialBuckets(0.0002, 2, 16),
		}),
		FusedRequests: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "queen_push_fused_requests", Help: "Push requests fused into one commit.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 12),
		}),
		MailboxDepth: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "queen_mailbox_depth_items", Help: "Push items waiting in partition actors' mailboxes.",
		}),
		Overloads: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "queen_push_overloads_total", Help: "Push requests refused with code overloaded.",
		}),
		PollsRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "queen_pop_polls_refused_total", Help: "Long polls refused because too many were waiting (429 too_many_polls), on the broker or of one client.",
		}),
		StalledBodies: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "queen_http_stalled_bodies_total", Help: "HTTP push and transaction bodies cut off after nothing arrived for the body idle timeout (408 body_stalled).",
		}),
		PopMessages: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "queen_pop_messages_total", Help: "Messages returned by pops.",
		}),
		AckItems: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "queen_ack_items_total", Help: "Ack items answered, by result.",
		}, []string{"result"}),
		TracesDiscarded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "queen_traces_discarded_total", Help: "Message trace events accepted by POST /api/v1/traces and not kept.",
		}),
		LockWaitSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "queen_lock_wait_seconds", Help: "Time for row locks to be granted (push: a bundle's partition rows; ack: a consumer row; transaction: its partition rows), timed-out waits included.",
			Buckets: prometheus.ExponentialBuckets(0.00005, 4, 10),
		}, []string{"op"}),
		LockTimeouts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "queen_lock_timeouts_total", Help: "Lock waits cut off by the lock timeout (QUEEN_LOCK_TIMEOUT), answered with code lock_timeout.",
		}, []string{"op"}),
		PushMoved: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "queen_push_moved_total", Help: "Push transactions run again with every row locked first: a partition the actor knew had been moved by another writer (a transaction, another broker) or had lost its allocator row.",
		}),
	}
	r.MustRegister(m.PushRequests, m.PushItems, m.QueueItems, m.DedupPayloadMismatch, m.Commits, m.CommitSeconds, m.FusedRequests, m.MailboxDepth, m.Overloads, m.StalledBodies, m.PollsRefused,
		m.PopMessages, m.AckItems, m.TracesDiscarded, m.LockWaitSeconds, m.LockTimeouts, m.PushMoved,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, op := range []string{"push", "ack", "transaction"} {
		m.LockTimeouts.WithLabelValues(op) // exported at 0 before the first timeout
	}
	return m
}

// ObserveLock records one lock acquisition (LockWaitSeconds, LockTimeouts).
func (m *Set) ObserveLock(op string, seconds float64, timedOut bool) {
	m.LockWaitSeconds.WithLabelValues(op).Observe(seconds)
	if timedOut {
		m.LockTimeouts.WithLabelValues(op).Inc()
	}
}
