package report

import (
	"fmt"
	"sort"
	"strings"
)

// ConsumeReport is the consume phase: throughput, latency, delivery
// counts, the wake probe and the end-to-end audit.
type ConsumeReport struct {
	ConsumersPerGroup int      `json:"consumers_per_group"`
	Groups            []string `json:"groups"`
	FailRatio         float64  `json:"fail_ratio"`
	FailMode          string   `json:"fail_mode"`
	RetryLimit        int      `json:"retry_limit"`
	LeaseSeconds      int      `json:"lease_seconds"`
	Batch             int      `json:"batch"`
	// ConsumePartitions is the most partitions a pop could claim
	// (loadtest.Config.ConsumePartitions); PartitionsPerPop how many the pops that
	// returned messages claimed on average.
	ConsumePartitions int     `json:"consume_partitions"`
	PartitionsPerPop  float64 `json:"partitions_per_pop"`
	// Seconds is the consume phase, from the start of the run to the
	// drain's end; DrainSeconds its part after the producers stopped.
	Seconds      float64 `json:"seconds"`
	DrainSeconds float64 `json:"drain_seconds"`
	Drained      bool    `json:"drained"`
	// DrainProblem says why the drain ended with cursors short of the end.
	DrainProblem string `json:"drain_problem,omitempty"`

	Pops      int64 `json:"pops"`
	EmptyPops int64 `json:"empty_pops"`
	PopErrors int64 `json:"pop_errors"`
	// Deliveries counts messages in pop replies, Handled handler
	// invocations (a batch stops at its first failure, so the rest of it is
	// delivered but not handled), Redeliveries deliveries of a (group,
	// message) after its first.
	Deliveries   int64 `json:"deliveries"`
	Handled      int64 `json:"handled"`
	Redeliveries int64 `json:"redeliveries"`
	// Acked counts acks answered acked; AckedPerSecond is over Seconds.
	Acked          int64   `json:"acked"`
	AckedPerSecond float64 `json:"acked_per_second"`
	DeadLettered   int64   `json:"dead_lettered"`
	// AckCalls counts ack calls, AckErrors those without an answer (their
	// acks' outcome unknown); AckResults counts answers by result.
	AckCalls   int64            `json:"ack_calls"`
	AckErrors  int64            `json:"ack_errors"`
	AckResults map[string]int64 `json:"ack_results"`
	LastError  string           `json:"last_error,omitempty"`

	PerGroup []GroupReport `json:"per_group"`

	// Latency is push commit (the message's createdAt, PostgreSQL's clock
	// on this host) → handler, over each (group, message)'s first handling.
	// These three are p50 and p99 to a Histogram bucket (about 3 %), the
	// exact maximum.
	Latency    Latency `json:"e2e_latency_ms"`
	E2ESamples int64   `json:"e2e_samples"`
	// PopLatency is the request latency of pops that returned messages
	// (a long poll that waited counts its wait); AckLatency of ack calls.
	PopLatency Latency     `json:"pop_latency_ms"`
	AckLatency Latency     `json:"ack_latency_ms"`
	Wake       *WakeReport `json:"wake_probe,omitempty"`
	// Poison is how long poison messages held their partitions (omitted
	// without poison messages).
	Poison *PoisonReport `json:"poison,omitempty"`

	Audit *ConsumeAudit `json:"audit"`
}

// PoisonReport is how poison messages held their partitions (SPEC.md §4:
// a partition is ordered, so a poison message holds its group there until
// it is dead-lettered), seen by the consumers and by the brokers.
type PoisonReport struct {
	// AbandonedLeases counts leases the consumers abandoned on a poison
	// message (the crash fail modes): each one lease expiry at a broker.
	// AbandonedSpans counts those that left several messages unacked: the
	// broker charges none of them and bisects the redelivery.
	AbandonedLeases int64 `json:"abandoned_leases"`
	AbandonedSpans  int64 `json:"abandoned_multi_message_spans"`
	// Stalls counts (group, partition) waits on poison messages that ended:
	// from a poison message's first failed handling to the first delivery
	// past it (and past any poison message that failed there meanwhile).
	// StallSeconds is their sum; IsolateMS their distribution, the time to
	// isolate a poison message (ms). OpenStalls were still waiting when the
	// consumers stopped.
	Stalls       int64   `json:"stalls"`
	StallSeconds float64 `json:"stall_seconds"`
	IsolateMS    Latency `json:"time_to_isolate_ms"`
	OpenStalls   int64   `json:"open_stalls"`
	// Brokers is what the brokers' /metrics counted over the consume phase
	// (the difference of their counters at its end and its start, summed
	// over the brokers that answered both times; omitted when none did; a
	// broker restarted meanwhile counts from zero).
	Brokers *BrokerPoison `json:"brokers,omitempty"`
}

// BrokerPoison is the brokers' side of PoisonReport (their /metrics).
type BrokerPoison struct {
	// LeaseExpiries: expired leases settled that held unacked messages
	// (queen_lease_expiries_total); Bisections: those over several
	// messages, none charged (queen_lease_bisections_total); DeadLettered:
	// messages dead-lettered by single-message expiries
	// (queen_lease_expiry_dead_letters_total); StallSeconds: the seconds
	// bisections held their partitions (queen_poison_stall_seconds_total).
	LeaseExpiries int64   `json:"lease_expiries"`
	Bisections    int64   `json:"bisections"`
	DeadLettered  int64   `json:"expiry_dead_letters"`
	StallSeconds  float64 `json:"stall_seconds"`
}

// GroupReport is one consumer group's share.
type GroupReport struct {
	Group          string  `json:"group"`
	Acked          int64   `json:"acked"`
	AckedPerSecond float64 `json:"acked_per_second"`
	Deliveries     int64   `json:"deliveries"`
	Handled        int64   `json:"handled"`
	Redeliveries   int64   `json:"redeliveries"`
	DeadLettered   int64   `json:"dead_lettered"`
	// Messages and Poison: the stored messages the group had to consume,
	// and the poison ones among them (from the audit).
	Messages int64 `json:"messages"`
	Poison   int64 `json:"poison"`
	// ExpiredBeforeAcked counts the group's messages that retention
	// deleted before the group acked (or dead-lettered) them: its cursor
	// passed them unacked at least retentionSeconds after they were stored
	// (contract §7: retention deletes segments consumed or not). Not lost.
	ExpiredBeforeAcked int64 `json:"expired_before_acked"`
}

// ConsumeAudit is the end-to-end audit of the consume phase.
type ConsumeAudit struct {
	Passed bool `json:"passed"`
	// Complete is false when the run was interrupted: only the checks
	// that do not need a finished consumption were made.
	Complete bool `json:"complete"`
	// Messages and Poison count the stored messages (and the poison ones
	// among them) each group had to consume; DeadLetters the DLQ rows of
	// the run's groups.
	Messages    int64 `json:"messages"`
	Poison      int64 `json:"poison"`
	DeadLetters int64 `json:"dead_letters"`
	// AckOutcomeUnknown counts (group, message) pairs whose only acks went
	// unanswered (a lost reply; the cursor moved past them anyway), and
	// RedeliveredAfterLostAck those handled again after such an ack: both
	// legitimate, reported rather than hidden.
	AckOutcomeUnknown       int64 `json:"ack_outcome_unknown"`
	RedeliveredAfterLostAck int64 `json:"redelivered_after_lost_ack"`
	// ExpiredBeforeAcked counts (group, message) pairs that retention
	// deleted before the group acked or dead-lettered the message (per
	// group: GroupReport.ExpiredBeforeAcked): a message whose group's
	// cursor passed it unacked at least the queue's retentionSeconds after
	// it was stored. Legitimate (contract §7), reported, never lost; one
	// passed sooner is a finding (never_delivered, not_acked, dlq_missing).
	ExpiredBeforeAcked int64 `json:"expired_before_acked"`
	// AckAfterLease counts acks answered lease_invalid at least the queue's
	// leaseTime after their pop was sent: the lease had run out (a frozen
	// broker, a database restart or a busy machine held the pop or the
	// ack), the ack was not applied and the span delivered again — the
	// broker's right answer, reported rather than hidden. A lease_invalid
	// answered sooner is a finding (ack_refused).
	AckAfterLease int64 `json:"ack_after_lease"`
	// Issues counts findings by kind (the Issue* constants of the consume
	// audit); Examples shows a few of each as "kind: description".
	Issues   map[string]int64 `json:"issues"`
	Examples []string         `json:"examples,omitempty"`
}

// WakeReport is the wake-latency probe: how long a parked long poll takes
// to answer once a message arrives, from the message's commit
// (createdAt, PostgreSQL's clock on this host) to the pop's reply.
type WakeReport struct {
	Queue   string `json:"queue"`
	Rounds  int    `json:"rounds"`
	Samples int    `json:"samples"`
	// Misses counts rounds whose long poll came back without the message
	// (timed out, failed, or returned something else).
	Misses int `json:"misses"`
	Latency
	LastError string `json:"last_error,omitempty"`
}

func (c *ConsumeReport) writeText(b *strings.Builder) {
	fmt.Fprintf(b, "  consume   %d groups × %d consumers · batch %d · up to %d partitions a pop (%.2f on average) · fail ratio %g · retryLimit %d · leaseTime %d s · %.1f s (drain %.1f s)\n",
		len(c.Groups), c.ConsumersPerGroup, c.Batch, max(c.ConsumePartitions, 1), c.PartitionsPerPop, c.FailRatio, c.RetryLimit, c.LeaseSeconds, c.Seconds, c.DrainSeconds)
	fmt.Fprintf(b, "  consumed  %s acked (%s acked/s) · %s dead-lettered · %s handled · %s delivered, %s of them redeliveries\n",
		Commas(c.Acked), Commas(int64(c.AckedPerSecond)), Commas(c.DeadLettered), Commas(c.Handled), Commas(c.Deliveries), Commas(c.Redeliveries))
	for _, g := range c.PerGroup {
		fmt.Fprintf(b, "            %s: %s acked (%s/s), %s dead-lettered, %s handled; %s messages, %s poison\n",
			g.Group, Commas(g.Acked), Commas(int64(g.AckedPerSecond)), Commas(g.DeadLettered), Commas(g.Handled), Commas(g.Messages), Commas(g.Poison))
	}
	fmt.Fprintf(b, "  requests  %s pops (%s empty, %s failed) · %s ack calls (%s without answer)",
		Commas(c.Pops), Commas(c.EmptyPops), Commas(c.PopErrors), Commas(c.AckCalls), Commas(c.AckErrors))
	if len(c.AckResults) > 0 {
		res := make([]string, 0, len(c.AckResults))
		for k, n := range c.AckResults {
			res = append(res, fmt.Sprintf("%s %s", k, Commas(n)))
		}
		sort.Strings(res)
		fmt.Fprintf(b, " · results %s", strings.Join(res, ", "))
	}
	b.WriteByte('\n')
	fmt.Fprintf(b, "            pop (with messages) p50 %.1f ms · p99 %.1f ms · max %.1f ms · ack p50 %.1f ms · p99 %.1f ms · max %.1f ms\n",
		c.PopLatency.P50, c.PopLatency.P99, c.PopLatency.Max, c.AckLatency.P50, c.AckLatency.P99, c.AckLatency.Max)
	if c.LastError != "" {
		fmt.Fprintf(b, "            last consumer error: %s\n", c.LastError)
	}
	fmt.Fprintf(b, "  e2e       push commit → handler p50 %.1f ms · p99 %.1f ms · max %.1f ms (%s first handlings)\n",
		c.Latency.P50, c.Latency.P99, c.Latency.Max, Commas(c.E2ESamples))
	if p := c.Poison; p != nil {
		fmt.Fprintf(b, "  poison    %s leases abandoned (%s over several messages) · %s stalls, %.1f s in all, time to isolate p50 %.0f ms · p99 %.0f ms · max %.0f ms · %s still waiting\n",
			Commas(p.AbandonedLeases), Commas(p.AbandonedSpans), Commas(p.Stalls), p.StallSeconds, p.IsolateMS.P50, p.IsolateMS.P99, p.IsolateMS.Max, Commas(p.OpenStalls))
		if br := p.Brokers; br != nil {
			fmt.Fprintf(b, "            brokers: %s lease expiries, %s bisections, %s dead-lettered by expiry, %.1f s bisecting\n",
				Commas(br.LeaseExpiries), Commas(br.Bisections), Commas(br.DeadLettered), br.StallSeconds)
		}
	}
	if w := c.Wake; w != nil {
		fmt.Fprintf(b, "  wake      parked long poll, push → reply p50 %.1f ms · p99 %.1f ms · max %.1f ms (%d of %d rounds, %d missed)\n",
			w.P50, w.P99, w.Max, w.Samples, w.Rounds, w.Misses)
		if w.LastError != "" {
			fmt.Fprintf(b, "            last probe error: %s\n", w.LastError)
		}
	}
	a := c.Audit
	if a == nil {
		return
	}
	scope := ""
	if !a.Complete {
		scope = " (interrupted: partial checks)"
	}
	if a.Passed {
		once := "exactly once"
		if a.ExpiredBeforeAcked > 0 {
			once = "exactly once or expired before acked"
		}
		fmt.Fprintf(b, "  e2e audit passed%s: per group, %s stored messages: %s acked %s, %s poison each handled %d times and dead-lettered once; cursors at the last offsets",
			scope, Commas(a.Messages), Commas(a.Messages-a.Poison), once, Commas(a.Poison), c.RetryLimit+1)
	} else {
		kinds := make([]string, 0, len(a.Issues))
		for k, n := range a.Issues {
			kinds = append(kinds, fmt.Sprintf("%s %s", k, Commas(n)))
		}
		sort.Strings(kinds)
		fmt.Fprintf(b, "  e2e audit FAILED%s: %s", scope, strings.Join(kinds, " · "))
	}
	if a.AckOutcomeUnknown+a.RedeliveredAfterLostAck > 0 {
		fmt.Fprintf(b, "; %s acks without an answer (applied, the cursor moved), %s redeliveries after a lost ack", Commas(a.AckOutcomeUnknown), Commas(a.RedeliveredAfterLostAck))
	}
	if a.AckAfterLease > 0 {
		fmt.Fprintf(b, "; %s acks answered lease_invalid after their lease ran out (not applied, delivered again)", Commas(a.AckAfterLease))
	}
	if a.ExpiredBeforeAcked > 0 {
		var per []string
		for _, g := range c.PerGroup {
			if g.ExpiredBeforeAcked > 0 {
				per = append(per, fmt.Sprintf("%s %s", g.Group, Commas(g.ExpiredBeforeAcked)))
			}
		}
		fmt.Fprintf(b, "; expired before acked (retention deleted them first, not lost): %s", strings.Join(per, " · "))
	}
	b.WriteByte('\n')
	for _, e := range a.Examples {
		fmt.Fprintf(b, "            %s\n", e)
	}
}
