package broker

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/queen-mq/queen-go/metrics"
	"github.com/queen-mq/queen-go/shards"
)

// registerClusterMetrics exposes the shards this broker holds and how its
// router served the shard groups of pushes (SPEC.md §9), and the shard
// messages its shard server's bounded subscriptions dropped or found past
// their deadline.
func registerClusterMetrics(m *metrics.Set, members *shards.Membership, r *shards.Router, srv *shards.Server) {
	route := func(name, help string, f func(shards.RouterStats) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(f(r.Stats())) })
	}
	m.Registry.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "queen_shards_held", Help: "Shards this broker holds leases on."},
			func() float64 { return float64(len(members.Held())) }),
		route("queen_shard_routes_local_total", "Shard groups of pushes served by this broker's actors (it owns the shard, or nobody does).", func(s shards.RouterStats) uint64 { return s.Local }),
		route("queen_shard_routes_remote_total", "Shard groups of pushes sent to the owning broker over NATS.", func(s shards.RouterStats) uint64 { return s.Remote }),
		route("queen_shard_hops_total", "Requests sent to other brokers over NATS: one per push, owner and chunk, carrying the items of every shard of the push that broker owns.", func(s shards.RouterStats) uint64 { return s.Hops }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "queen_shard_pending_dropped_total", Help: "Shard push messages dropped because a shard subscription's pending bound was full (slow consumer); their routers answered the items failed with code timeout."},
			func() float64 { return float64(srv.Dropped()) }),
		route("queen_shard_routes_fallback_total", "Hop chunks whose items were served here after all: no broker answered (it stopped or died), it answered shutting_down (stopping, or no longer serving the items' shards; nothing written there), or an item was above NATS's max_payload.", func(s shards.RouterStats) uint64 { return s.Fallback }),
		route("queen_shard_routes_unreachable_total", "Hops (chunks) not sent because this broker's NATS connection was down; their items were answered failed with code nats_unavailable.", func(s shards.RouterStats) uint64 { return s.Unreachable }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "queen_shard_expired_total", Help: "Shard push requests not executed because they arrived after their sender's deadline (kept in a NATS reconnect buffer through an outage); answered timeout."},
			func() float64 { return float64(srv.Expired()) }),
	)
}
