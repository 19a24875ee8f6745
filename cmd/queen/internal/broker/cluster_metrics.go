package broker

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/queen-mq/queen-go/metrics"
	"github.com/queen-mq/queen-go/shards"
)

// registerClusterMetrics exposes the shards this broker holds and how its
// router served the shard groups of pushes (SPEC.md §9).
func registerClusterMetrics(m *metrics.Set, members *shards.Membership, r *shards.Router) {
	route := func(name, help string, f func(shards.RouterStats) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(f(r.Stats())) })
	}
	m.Registry.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "queen_shards_held", Help: "Shards this broker holds leases on."},
			func() float64 { return float64(len(members.Held())) }),
		route("queen_shard_routes_local_total", "Shard groups of pushes served by this broker's actors (it owns the shard, or nobody does).", func(s shards.RouterStats) uint64 { return s.Local }),
		route("queen_shard_routes_remote_total", "Shard groups of pushes sent to the owning broker over NATS.", func(s shards.RouterStats) uint64 { return s.Remote }),
		route("queen_shard_routes_fallback_total", "Shard groups sent to an owner that did not serve them (no responder, shutting down) and served here.", func(s shards.RouterStats) uint64 { return s.Fallback }),
	)
}
