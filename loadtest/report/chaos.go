package report

import (
	"fmt"
	"sort"
	"strings"
)

// The kinds of fault (FaultReport.Kind).
const (
	// FaultKill: a broker killed (SIGKILL) and restarted.
	FaultKill = "kill"
	// FaultStop: a broker frozen (SIGSTOP) and resumed.
	FaultStop = "stop"
	// FaultPGRestart: PostgreSQL restarted.
	FaultPGRestart = "pg-restart"
	// FaultPGFailover: the primary killed, the standby promoted.
	FaultPGFailover = "pg-failover"
	// FaultNATSKill: a NATS node killed and restarted.
	FaultNATSKill = "nats-kill"
)

// ClientErrors is what the clients (producers and consumers) saw in a
// stretch of the run: requests, those that failed (a transport error, a
// timeout, an error reply, or a push with any item answered failed), the
// failures by kind, and the pushed items answered failed (each retried with
// its transactionId).
type ClientErrors struct {
	Seconds     float64          `json:"seconds"`
	Requests    int64            `json:"requests"`
	Errors      int64            `json:"errors"`
	ErrorRate   float64          `json:"error_rate"`
	FailedItems int64            `json:"failed_items"`
	ByKind      map[string]int64 `json:"by_kind"`
}

// ClusterReport is the cluster part of a `--brokers N` run: the brokers,
// how long shards had no live owner, and the errors clients saw (the
// faults themselves are in Report.Chaos).
type ClusterReport struct {
	Brokers    int      `json:"brokers"`
	BrokerURLs []string `json:"broker_urls"`
	// NATSNodes is the node processes of the NATS cluster (--nats-nodes;
	// 0: one NATS server in the load-test process), NATSURL their list.
	NATSNodes         int     `json:"nats_nodes,omitempty"`
	NATSURL           string  `json:"nats_url,omitempty"`
	ShardLeaseSeconds float64 `json:"shard_lease_seconds"`
	Shards            int     `json:"shards"`
	// Ownership, from GET /api/v1/cluster polled about every 200 ms: a
	// shard is ownerless while it has no live lease or its lease is held
	// by a killed or stopped broker. OwnerlessShardSeconds is the integral
	// over the run; the Max* figures are the worst fault's.
	OwnerlessShardSeconds    float64 `json:"ownerless_shard_seconds"`
	MaxOwnerlessShardSeconds float64 `json:"max_ownerless_shard_seconds_per_fault"`
	MaxOwnerlessSeconds      float64 `json:"max_ownerless_seconds_per_fault"`
	MaxOwnerlessShards       int     `json:"max_ownerless_shards"`
	ClusterPolls             int     `json:"cluster_polls"`
	ClusterPollErrors        int     `json:"cluster_poll_errors"`
	// Client is the whole run.
	Client ClientErrors `json:"client"`
}

// ChaosReport is the chaos of a run (--chaos): the faults injected, by
// kind, and what the clients saw during each, after it and outside them.
type ChaosReport struct {
	Mode            string  `json:"mode"`
	IntervalSeconds float64 `json:"interval_seconds"`
	// KillPauseSeconds is how long a killed broker stays down before its
	// restart; StopPauseSeconds how long a stopped one stays frozen (for
	// the modes that inject them).
	KillPauseSeconds float64 `json:"kill_pause_seconds,omitempty"`
	StopPauseSeconds float64 `json:"stop_pause_seconds,omitempty"`
	// NATSKillPauseSeconds is how long a killed NATS node stays down
	// before its restart (nats-kill, or mixed with NATS nodes).
	NATSKillPauseSeconds float64 `json:"nats_kill_pause_seconds,omitempty"`
	// Seed drew the brokers and (mixed) the order of the faults: pass it
	// as --chaos-seed to draw the same again.
	Seed uint64 `json:"seed"`
	// Faults counts every fault; Kills, Stops, PGRestarts, PGFailovers and
	// NATSKills by kind (a failover recovers once every broker answers
	// healthy on the promoted standby; a NATS node kill once every broker's
	// NATS connections are back and the node is restarted and routed to
	// every other node again);
	// Recovered those whose target came back (a killed broker restarted
	// and healthy, a stopped one resumed and healthy, PostgreSQL accepting
	// connections again).
	Faults      int `json:"faults"`
	Kills       int `json:"kills"`
	Stops       int `json:"stops"`
	PGRestarts  int `json:"pg_restarts"`
	PGFailovers int `json:"pg_failovers"`
	NATSKills   int `json:"nats_kills"`
	Recovered   int `json:"recovered"`
	// During is the faults' [start, recovery) stretches together; After the
	// stretches after each recovery until things settled (the latest of
	// the recovery, every shard owned again and the clients' request
	// timeout after the fault, plus a second, so the requests the fault left
	// unanswered count); Steady the rest of the run.
	During ClientErrors  `json:"during"`
	After  ClientErrors  `json:"after"`
	Steady ClientErrors  `json:"steady"`
	Events []FaultReport `json:"events"`
}

// FaultReport is one fault: its kind, its target, when (seconds since the
// load started), how long until its target recovered, and what it cost.
type FaultReport struct {
	Kind string `json:"kind"`
	// Broker is the broker index (kill, stop; -1 for pg-restart,
	// pg-failover and nats-kill), BrokerID
	// the id it had.
	Broker   int    `json:"broker"`
	BrokerID string `json:"broker_id,omitempty"`
	// A nats-kill: NATSNode is the node killed (queen-nats-<i>);
	// NodeConnections the client connections it held when killed, of them
	// BrokerConnections the brokers' (each broker has two). ServingAfterSeconds
	// is this fault's recovery time: from the SIGKILL until the nodes up
	// hold every broker's NATS connections again with at least the
	// subscriptions they had before (every broker serving its NATS API and
	// shard subjects; polled every 50 ms on the nodes' /connz, and bounded
	// by the 15 s ping budget: later is a recovery error). RejoinedAfterSeconds
	// is when the restarted node had its routes to every other node back
	// (= RecoveredAfterSeconds).
	NATSNode             string  `json:"nats_node,omitempty"`
	NodeConnections      int     `json:"node_connections,omitempty"`
	BrokerConnections    int     `json:"broker_connections,omitempty"`
	ServingAfterSeconds  float64 `json:"serving_after_seconds,omitempty"`
	RejoinedAfterSeconds float64 `json:"rejoined_after_seconds,omitempty"`
	// AtSeconds is when the fault started; PauseSeconds how long the broker
	// stayed down or frozen on purpose; RecoveredAfterSeconds the time from
	// the fault to its target's recovery (0 with Error).
	AtSeconds             float64 `json:"at_seconds"`
	PauseSeconds          float64 `json:"pause_seconds"`
	RecoveredAfterSeconds float64 `json:"recovered_after_seconds"`
	Error                 string  `json:"error,omitempty"`
	// ErrorsUntilSeconds is when, after the fault's start, the clients saw
	// their last error before the next fault (0: none at all).
	ErrorsUntilSeconds float64 `json:"errors_until_seconds"`
	// Ownership around the fault (--brokers N): OwnerlessSeconds runs from
	// the fault to the first poll at which every shard had a live owner
	// again (after the last poll that found one without).
	OwnerlessSeconds      float64 `json:"ownerless_seconds,omitempty"`
	MaxOwnerlessShards    int     `json:"max_ownerless_shards,omitempty"`
	OwnerlessShardSeconds float64 `json:"ownerless_shard_seconds,omitempty"`
	// During is [start, recovery); After is from the recovery until things
	// settled (see ChaosReport.After).
	During ClientErrors `json:"during"`
	After  ClientErrors `json:"after"`
}

func (c *ClusterReport) writeText(b *strings.Builder) {
	fmt.Fprintf(b, "  cluster   %d brokers · shard lease %.1f s · %d shards · clients %d errors of %d requests (%.2f%%)\n",
		c.Brokers, c.ShardLeaseSeconds, c.Shards, c.Client.Errors, c.Client.Requests, 100*c.Client.ErrorRate)
	if c.NATSNodes > 0 {
		fmt.Fprintf(b, "  nats      a cluster of %d node processes: %s\n", c.NATSNodes, c.NATSURL)
	}
	fmt.Fprintf(b, "  ownership %.1f ownerless shard-seconds in all · worst fault: %.1f shard-seconds, %.1f s until every shard was owned, %d shards at once (%d polls, %d failed)\n",
		c.OwnerlessShardSeconds, c.MaxOwnerlessShardSeconds, c.MaxOwnerlessSeconds, c.MaxOwnerlessShards, c.ClusterPolls, c.ClusterPollErrors)
}

func (c *ChaosReport) writeText(b *strings.Builder) {
	fmt.Fprintf(b, "  chaos     %s every %.0f s (seed %d): %s — %s, %s, %s, %s, %s; %d recovered\n",
		c.Mode, c.IntervalSeconds, c.Seed, plural(c.Faults, "fault"), plural(c.Kills, "kill"), plural(c.Stops, "stop"), plural(c.PGRestarts, "pg restart"),
		plural(c.PGFailovers, "pg failover"), plural(c.NATSKills, "nats kill"), c.Recovered)
	for _, e := range c.Events {
		var what string
		switch e.Kind {
		case FaultKill:
			what = fmt.Sprintf("kill broker %d, down %.1f s", e.Broker, e.PauseSeconds)
		case FaultStop:
			what = fmt.Sprintf("stop broker %d, frozen %.1f s", e.Broker, e.PauseSeconds)
		case FaultPGFailover:
			what = "pg-failover (primary SIGKILLed, standby promoted)"
		case FaultNATSKill:
			what = fmt.Sprintf("nats-kill %s (%d connections, %d of the brokers'), down %.1f s; brokers serving again after %.1f s",
				e.NATSNode, e.NodeConnections, e.BrokerConnections, e.PauseSeconds, e.ServingAfterSeconds)
		default:
			what = "pg-restart"
		}
		rec := fmt.Sprintf("recovered after %.1f s", e.RecoveredAfterSeconds)
		if e.Error != "" {
			rec = "recovery FAILED: " + e.Error
		}
		fmt.Fprintf(b, "            %s at %.1f s: %s", what, e.AtSeconds, rec)
		if e.MaxOwnerlessShards > 0 || e.OwnerlessSeconds > 0 {
			fmt.Fprintf(b, " · ownerless %.1f s, %d shards max, %.1f shard-seconds", e.OwnerlessSeconds, e.MaxOwnerlessShards, e.OwnerlessShardSeconds)
		}
		fmt.Fprintf(b, " · during: %s · after %.1f s: %s", clientLine(e.During), e.After.Seconds, clientLine(e.After))
		if e.ErrorsUntilSeconds > 0 {
			fmt.Fprintf(b, " · last error +%.1f s", e.ErrorsUntilSeconds)
		}
		b.WriteByte('\n')
	}
	fmt.Fprintf(b, "  clients   during faults %.1f s: %s · after them %.1f s: %s · steady %.1f s: %s\n",
		c.During.Seconds, clientLine(c.During), c.After.Seconds, clientLine(c.After), c.Steady.Seconds, clientLine(c.Steady))
}

// plural is "1 kill", "2 kills".
func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// clientLine is "E errors of R requests (x%), F failed items [kinds]".
func clientLine(c ClientErrors) string {
	return fmt.Sprintf("%d errors of %d requests (%.2f%%), %d failed items%s", c.Errors, c.Requests, 100*c.ErrorRate, c.FailedItems, kinds(c.ByKind))
}

func kinds(m map[string]int64) string {
	if len(m) == 0 {
		return ""
	}
	out := make([]string, 0, len(m))
	for k, n := range m {
		out = append(out, fmt.Sprintf("%s %d", k, n))
	}
	sort.Strings(out)
	return " [" + strings.Join(out, ", ") + "]"
}
