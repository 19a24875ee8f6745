package loadtest

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func f64(v float64) *float64 { return &v }

func TestStoragePerMessage(t *testing.T) {
	t.Parallel()
	start := TimelinePoint{DBBytes: 10_000_000, SidecarBytes: 1_000_000}
	tests := []struct {
		name      string
		prev, cur TimelinePoint
		want      bytesPerMessage
	}{
		{"from the start",
			start,
			TimelinePoint{DBBytes: 10_390_000, SidecarBytes: 1_150_000, WALBytes: 480_000, StoredMessages: 1000},
			bytesPerMessage{WAL: f64(480), DB: f64(390), Sidecar: f64(150)}},
		{"an interval between two points",
			TimelinePoint{DBBytes: 20_000_000, SidecarBytes: 2_000_000, WALBytes: 30_000_000, StoredMessages: 100_000},
			TimelinePoint{DBBytes: 20_700_000, SidecarBytes: 2_100_000, WALBytes: 31_400_000, StoredMessages: 103_000},
			bytesPerMessage{WAL: f64(466.7), DB: f64(233.3), Sidecar: f64(33.3)}},
		{"retention shrinks the database",
			TimelinePoint{DBBytes: 20_000_000, SidecarBytes: 2_000_000, WALBytes: 30_000_000, StoredMessages: 100_000},
			TimelinePoint{DBBytes: 19_000_000, SidecarBytes: 2_000_000, WALBytes: 35_000_000, StoredMessages: 110_000},
			bytesPerMessage{WAL: f64(500), DB: f64(-100), Sidecar: f64(0)}},
		{"nothing stored",
			TimelinePoint{DBBytes: 20_000_000, WALBytes: 30_000_000, StoredMessages: 100_000},
			TimelinePoint{DBBytes: 20_100_000, WALBytes: 30_500_000, StoredMessages: 100_000},
			bytesPerMessage{}},
		{"the previous reading failed",
			TimelinePoint{StoredMessages: 100_000},
			TimelinePoint{DBBytes: 20_100_000, WALBytes: 30_500_000, StoredMessages: 101_000},
			bytesPerMessage{}},
		{"this reading failed",
			TimelinePoint{DBBytes: 20_000_000, WALBytes: 30_000_000, StoredMessages: 100_000},
			TimelinePoint{StoredMessages: 101_000},
			bytesPerMessage{}},
		{"the start's WAL position is unknown",
			TimelinePoint{DBBytes: 20_000_000, StoredMessages: 100_000},
			TimelinePoint{DBBytes: 20_400_000, StoredMessages: 101_000},
			bytesPerMessage{DB: f64(400), Sidecar: f64(0)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := storagePerMessage(tc.prev, tc.cur)
			require.Equal(t, tc.want, got)
		})
	}
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
