package target

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/queen-mq/queen-go/transport/client"
)

// BrokerMetrics are the figures the harness reads from a broker's /metrics
// (ScrapeMetrics): the timeline's memory and dedup cache figures, and the
// consume report's lease and poison figures. Absent metrics read 0.
type BrokerMetrics struct {
	// RSS is process_resident_memory_bytes (bytes).
	RSS int64
	// CacheBytes, Evictions and Hydrations are the dedup cache's
	// queen_dedup_cache_bytes (bytes), _evictions_total and
	// _hydrations_total.
	CacheBytes, Evictions, Hydrations int64
	// NarrowedProbes and FullProbes are the partition probes the cache
	// narrowed with a watermark and those of the whole window
	// (queen_dedup_narrowed_probes_total,
	// queen_dedup_full_window_probes_total).
	NarrowedProbes, FullProbes int64
	// LeaseExpiries, Bisections and ExpiryDead are the lease expiries,
	// bisections and expiry dead letters the broker settled
	// (queen_lease_expiries_total, queen_lease_bisections_total,
	// queen_lease_expiry_dead_letters_total; SPEC.md §4).
	LeaseExpiries, Bisections, ExpiryDead int64
	// StallSeconds is queen_poison_stall_seconds_total (seconds).
	StallSeconds float64
}

// ScrapeMetrics reads the figures of base's /metrics (an HTTP base URL,
// http://host:port) with the Go client over hc. The error names the URL
// (a killed broker, or metrics not reachable).
func ScrapeMetrics(ctx context.Context, hc *http.Client, base string) (BrokerMetrics, error) {
	var m BrokerMetrics
	ints := map[string]*int64{
		"queen_lease_expiries_total":            &m.LeaseExpiries,
		"queen_lease_bisections_total":          &m.Bisections,
		"queen_lease_expiry_dead_letters_total": &m.ExpiryDead,
		"process_resident_memory_bytes":         &m.RSS,
		"queen_dedup_cache_bytes":               &m.CacheBytes,
		"queen_dedup_cache_evictions_total":     &m.Evictions,
		"queen_dedup_cache_hydrations_total":    &m.Hydrations,
		"queen_dedup_narrowed_probes_total":     &m.NarrowedProbes,
		"queen_dedup_full_window_probes_total":  &m.FullProbes,
	}
	names := []string{"queen_poison_stall_seconds_total"}
	for n := range ints {
		names = append(names, n)
	}
	got, err := client.NewHTTP(client.HTTPConfig{URLs: []string{base}, Client: hc}).Metrics(ctx, names...)
	if err != nil {
		return m, fmt.Errorf("%s/metrics: %w", strings.TrimRight(base, "/"), err)
	}
	for n, dst := range ints {
		if v, ok := got[n]; ok {
			*dst = int64(v)
		}
	}
	m.StallSeconds = got["queen_poison_stall_seconds_total"]
	return m, nil
}
