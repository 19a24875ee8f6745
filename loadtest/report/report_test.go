package report

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestLatencyAndCommas(t *testing.T) {
	require.Equal(t, "0", Commas(0))
	require.Equal(t, "999", Commas(999))
	require.Equal(t, "1,000", Commas(1000))
	require.Equal(t, "-1,234,567", Commas(-1234567))
	require.Equal(t, 2.0, Median([]float64{3, 1, 2}))
	require.Equal(t, 2.5, Median([]float64{4, 1, 2, 3}))
}

func TestSustainedRatio(t *testing.T) {
	pts := func(period float64, rates ...float64) []TimelinePoint {
		out := make([]TimelinePoint, len(rates))
		for i, r := range rates {
			out[i] = TimelinePoint{T: period * float64(i+1), StoredPerSecond: r}
		}
		return out
	}
	for _, tc := range []struct {
		name       string
		points     []TimelinePoint
		ratio      float64
		meaningful bool
	}{
		{"empty", nil, 0, false},
		{"one point", pts(10, 100), 0, false},
		// 30 s: no point after the warm-up, so all of them; quarters of
		// [10, 30] are t <= 15 and t >= 25.
		{"short run", pts(10, 100, 80, 50), 0.5, false},
		// 10 min, a point a minute: the warm-up point (t=60, 1000) is
		// skipped; [120, 600]: first quarter t <= 240 (100, 100, 100),
		// last quarter t >= 480 (50, 60, 70).
		{"steady decline", pts(60, 1000, 100, 100, 100, 90, 80, 70, 50, 60, 70), 0.6, true},
		{"flat", pts(60, 5, 100, 100, 100, 100, 100, 100, 100, 100, 100), 1, true},
		{"zero start", pts(60, 5, 0, 0, 0, 100, 100, 100, 100, 100, 100), 0, true},
		// A point every 30 s: the one at t=60 covers [30, 60], inside
		// the warm-up; [90, 180]: first quarter t <= 112.5 (50), last
		// quarter t >= 157.5 (100).
		{"interval straddles warm-up", pts(30, 1, 1, 50, 1, 1, 100), 2, false},
		// 2 min: after the warm-up only t=120; below SustainedMinRun.
		{"two minutes", pts(60, 100, 80), 0, false},
		// Exactly 5 min (SustainedMinRun): meaningful; [120, 300]: first
		// quarter t <= 165 (100), last t >= 255 (80).
		{"five minutes", pts(60, 1, 100, 90, 90, 80), 0.8, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, m := SustainedRatio(tc.points)
			require.Equal(t, tc.ratio, r)
			require.Equal(t, tc.meaningful, m)
		})
	}
}

func TestTimelineJSON(t *testing.T) {
	rep := &Report{Mode: ModeBroker, Timeline: []TimelinePoint{{T: 10, StoredPerSecond: 1, ItemsPerSecond: 2, P50: 3, P99: 4,
		BrokerRSS: 5, DBBytes: 6, SidecarBytes: 7, WALBytes: 8, CacheBytes: 9, CacheEvictions: 10, CacheHydrations: 11,
		StoredMessages: 12, WALBytesPerMessage: f64(13), DBBytesPerMessage: f64(14), SidecarBytesPerMessage: f64(15)}},
		SustainedRatio: 0.9}
	b, err := json.Marshal(rep)
	require.NoError(t, err)
	var got struct {
		Timeline       []map[string]any `json:"timeline"`
		SustainedRatio *float64         `json:"sustained_ratio"`
	}
	require.NoError(t, json.Unmarshal(b, &got))
	require.NotNil(t, got.SustainedRatio)
	require.Equal(t, 0.9, *got.SustainedRatio)
	require.Len(t, got.Timeline, 1)
	want := map[string]float64{"t_s": 10, "stored_per_second": 1, "items_per_second": 2, "p50_ms": 3, "p99_ms": 4,
		"broker_rss_bytes": 5, "db_bytes": 6, "sidecar_bytes": 7, "wal_bytes": 8, "cache_bytes": 9, "cache_evictions": 10, "cache_hydrations": 11,
		"stored_messages": 12, "wal_bytes_per_message": 13, "db_bytes_per_message": 14, "sidecar_bytes_per_message": 15}
	for k, v := range want {
		require.Contains(t, got.Timeline[0], k)
		require.Equal(t, v, got.Timeline[0][k], k)
	}
	// The text report prints it for a run long enough to mean it, and only
	// then; without a broker's /metrics, rss and the cache are n/a.
	var sb strings.Builder
	rep.WriteText(&sb)
	require.NotContains(t, sb.String(), "sustained ratio")
	require.Regexp(t, `\n\s+10 .* n/a +n/a +n/a +0\.0\n`, sb.String(), "no cache figures without /metrics")
	require.Regexp(t, `\n\s+10 +1 +2 +3\.0 +4\.0 +0\.0 `, sb.String(), "the harness's own RSS (--embedded) is known")
	rep.Timeline[0].BrokerRSS = 0
	sb.Reset()
	rep.WriteText(&sb)
	require.Regexp(t, `\n\s+10 +1 +2 +3\.0 +4\.0 +n/a `, sb.String(), "no RSS at all")
	rep.Timeline[0].BrokerRSS = 5
	rep.SustainedRatioMeaningful = true
	rep.Timeline[0].BrokerMetrics = true
	sb.Reset()
	rep.WriteText(&sb)
	require.Contains(t, sb.String(), "sustained ratio 0.900")
	require.Regexp(t, `\n\s+10 +1 +2 +3\.0 +4\.0 +0\.0 .* 0\.0 +10 +11 +0\.0\n`, sb.String(), "every figure known")
}

func TestReportStorage(t *testing.T) {
	t.Parallel()
	rep := &Report{Mode: ModeBroker, StoredMessages: 8_697_882,
		WALBytesPerMessage: f64(231.4), DBBytesPerMessage: f64(212), SidecarBytesPerMessage: f64(31),
		SampleEverySeconds: 10, Timeline: []TimelinePoint{
			{T: 10, StoredMessages: 0},
			{T: 20, StoredMessages: 1000, WALBytesPerMessage: f64(480.2), DBBytesPerMessage: f64(390), SidecarBytesPerMessage: f64(150)},
		}}
	var sb strings.Builder
	rep.WriteText(&sb)
	text := sb.String()
	require.Contains(t, text, "storage   231 B WAL and 212 B database per stored message (sidecar 31 B), over 8,697,882 stored messages")
	require.Contains(t, text, "wal B/msg")
	require.Regexp(t, `\n\s+10 .* n/a +n/a +n/a `, text, "an interval without stored messages has no figures")
	require.Regexp(t, `\n\s+20 .* 480 +390 +150 `, text)

	b, err := json.Marshal(rep)
	require.NoError(t, err)
	var got map[string]any
	require.NoError(t, json.Unmarshal(b, &got))
	require.Equal(t, 231.4, got["wal_bytes_per_message"])
	require.Equal(t, 212.0, got["db_bytes_per_message"])
	require.Equal(t, 31.0, got["sidecar_bytes_per_message"])
	tl := got["timeline"].([]any)
	first, second := tl[0].(map[string]any), tl[1].(map[string]any)
	for _, k := range []string{"wal_bytes_per_message", "db_bytes_per_message", "sidecar_bytes_per_message"} {
		require.NotContains(t, first, k, "unknown: omitted, not 0")
		require.Contains(t, second, k)
	}
	require.Equal(t, 1000.0, second["stored_messages"])

	// Unknown figures: n/a in the text, absent from the JSON, and why.
	unknown := &Report{Mode: ModeBroker, StoredMessages: 5, StorageError: "database stats at the start: permission denied"}
	sb.Reset()
	unknown.WriteText(&sb)
	require.Contains(t, sb.String(), "storage   n/a WAL and n/a database per stored message (sidecar n/a), over 5 stored messages")
	require.Contains(t, sb.String(), "database stats at the start: permission denied")
	b, err = json.Marshal(unknown)
	require.NoError(t, err)
	require.NotContains(t, string(b), "bytes_per_message")
	require.Contains(t, string(b), `"storage_error":"database stats at the start: permission denied"`)
}

func f64(v float64) *float64 { return &v }

// TestDurability: the report's own durability type keeps the JSON names
// of the "postgres" section and the warning a non-durable run carries.
func TestDurability(t *testing.T) {
	on := Durability{Fsync: "on", SynchronousCommit: "on", FullPageWrites: "on"}
	require.True(t, on.Durable())
	require.False(t, Durability{Fsync: "on", SynchronousCommit: "off", FullPageWrites: "on"}.Durable())
	require.False(t, Durability{Fsync: "off", SynchronousCommit: "on", FullPageWrites: "on"}.Durable())
	require.Empty(t, notDurable(on))
	require.Contains(t, notDurable(Durability{Fsync: "off"}), "NOT DURABLE")
	b, err := json.Marshal(Report{Postgres: on})
	require.NoError(t, err)
	require.Contains(t, string(b), `"postgres":{"fsync":"on","synchronous_commit":"on","full_page_writes":"on"}`)
}
