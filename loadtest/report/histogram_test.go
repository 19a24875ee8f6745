package report

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestHistogram(t *testing.T) {
	var h Histogram
	for i := 1; i <= 1000; i++ {
		h.Record(time.Duration(i) * time.Millisecond)
	}
	l := h.Latency()
	require.InDelta(t, 500, l.P50, 500*0.04)
	require.InDelta(t, 990, l.P99, 990*0.04)
	require.Equal(t, 1000.0, l.Max)
	require.Zero(t, QuantileMS(make([]int64, HistBuckets), 0.5))
	for _, us := range []int64{0, 1, 63, 64, 65, 1000, 123456, 1 << 40} {
		i := histIndex(us)
		if us < 1<<39 {
			require.InEpsilon(t, float64(max(us, 1)), max(histValue(i), 1), 0.04, "%d", us)
		}
	}
}
