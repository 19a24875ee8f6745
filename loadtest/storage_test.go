package loadtest

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/queen-mq/queen-go/loadtest/report"
)

func TestStoragePerMessage(t *testing.T) {
	t.Parallel()
	start := report.TimelinePoint{DBBytes: 10_000_000, SidecarBytes: 1_000_000}
	tests := []struct {
		name      string
		prev, cur report.TimelinePoint
		want      bytesPerMessage
	}{
		{"from the start",
			start,
			report.TimelinePoint{DBBytes: 10_390_000, SidecarBytes: 1_150_000, WALBytes: 480_000, StoredMessages: 1000},
			bytesPerMessage{WAL: f64(480), DB: f64(390), Sidecar: f64(150)}},
		{"an interval between two points",
			report.TimelinePoint{DBBytes: 20_000_000, SidecarBytes: 2_000_000, WALBytes: 30_000_000, StoredMessages: 100_000},
			report.TimelinePoint{DBBytes: 20_700_000, SidecarBytes: 2_100_000, WALBytes: 31_400_000, StoredMessages: 103_000},
			bytesPerMessage{WAL: f64(466.7), DB: f64(233.3), Sidecar: f64(33.3)}},
		{"retention shrinks the database",
			report.TimelinePoint{DBBytes: 20_000_000, SidecarBytes: 2_000_000, WALBytes: 30_000_000, StoredMessages: 100_000},
			report.TimelinePoint{DBBytes: 19_000_000, SidecarBytes: 2_000_000, WALBytes: 35_000_000, StoredMessages: 110_000},
			bytesPerMessage{WAL: f64(500), DB: f64(-100), Sidecar: f64(0)}},
		{"nothing stored",
			report.TimelinePoint{DBBytes: 20_000_000, WALBytes: 30_000_000, StoredMessages: 100_000},
			report.TimelinePoint{DBBytes: 20_100_000, WALBytes: 30_500_000, StoredMessages: 100_000},
			bytesPerMessage{}},
		{"the previous reading failed",
			report.TimelinePoint{StoredMessages: 100_000},
			report.TimelinePoint{DBBytes: 20_100_000, WALBytes: 30_500_000, StoredMessages: 101_000},
			bytesPerMessage{}},
		{"this reading failed",
			report.TimelinePoint{DBBytes: 20_000_000, WALBytes: 30_000_000, StoredMessages: 100_000},
			report.TimelinePoint{StoredMessages: 101_000},
			bytesPerMessage{}},
		{"the start's WAL position is unknown",
			report.TimelinePoint{DBBytes: 20_000_000, StoredMessages: 100_000},
			report.TimelinePoint{DBBytes: 20_400_000, StoredMessages: 101_000},
			bytesPerMessage{DB: f64(400), Sidecar: f64(0)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := storagePerMessage(tc.prev, tc.cur)
			require.Equal(t, tc.want, got)
		})
	}
}

func f64(v float64) *float64 { return &v }
