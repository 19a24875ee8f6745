package report

import (
	"math"
	"math/bits"
	"sync/atomic"
	"time"
)

// Histogram counts durations in logarithmic buckets (microseconds, about
// 3% wide), lock-free, so quantiles of a whole run or of one interval need
// no memory per sample: the producers' push latency, the consumers'
// push→handler, pop and ack latencies.
type Histogram struct {
	counts [HistBuckets]atomic.Int64
	maxUS  atomic.Int64
}

// HistBuckets is the number of a Histogram's buckets.
const HistBuckets = 64 + 40*32

func histIndex(us int64) int {
	if us < 64 {
		return int(max(us, 0))
	}
	e := bits.Len64(uint64(us)) - 6 // >= 1
	m := us >> e                    // 32..63
	return min(64+(e-1)*32+int(m-32), HistBuckets-1)
}

// histValue is the middle of bucket i, in microseconds.
func histValue(i int) float64 {
	if i < 64 {
		return float64(i)
	}
	e := (i-64)/32 + 1
	m := int64((i-64)%32 + 32)
	return float64(m<<e) + float64(int64(1)<<e)/2
}

// Record counts one duration d (microseconds, negative as 0).
func (h *Histogram) Record(d time.Duration) {
	us := d.Microseconds()
	h.counts[histIndex(us)].Add(1)
	for {
		m := h.maxUS.Load()
		if us <= m || h.maxUS.CompareAndSwap(m, us) {
			return
		}
	}
}

// Snapshot copies the counts (HistBuckets of them), for QuantileMS of an
// interval: the difference of two snapshots.
func (h *Histogram) Snapshot() []int64 {
	out := make([]int64, HistBuckets)
	for i := range out {
		out[i] = h.counts[i].Load()
	}
	return out
}

// QuantileMS is the q-quantile (0..1) of counts (a Snapshot, or the
// difference of two) in milliseconds (0 when
// empty), to the bucket's precision.
func QuantileMS(counts []int64, q float64) float64 {
	var n int64
	for _, c := range counts {
		n += c
	}
	if n == 0 {
		return 0
	}
	rank := int64(math.Ceil(q * float64(n)))
	rank = max(rank, 1)
	var seen int64
	for i, c := range counts {
		seen += c
		if seen >= rank {
			return math.Round(histValue(i)) / 1e3
		}
	}
	return 0
}

// Latency is the run's request latency: p50 and p99 to the buckets'
// precision, the exact maximum.
func (h *Histogram) Latency() Latency {
	c := h.Snapshot()
	return Latency{P50: QuantileMS(c, 0.5), P99: QuantileMS(c, 0.99), Max: float64(h.maxUS.Load()) / 1e3}
}
