package persistence

import (
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	queen "github.com/queen-mq/queen-go"
)

// TestSpanMessages: the messages a pop builds from the segments it read,
// without PostgreSQL: only above the cursor, in offset order, at most Batch,
// within MaxBytes (the first message always, unless BytesStrict), with the
// retry counts of the consumer row; the reply names queue, partition and
// group only when it holds a message; cut says whether messages stay above
// the span (queen.PopCut).
func TestSpanMessages(t *testing.T) {
	segment := func(first int64, payloads ...string) popSegment {
		sg := popSegment{first: first}
		for i, p := range payloads {
			id := uuid.New()
			sg.ids = append(sg.ids, id[:]...)
			sg.frames = AppendFrame(sg.frames, "t"+strings.Repeat("x", int(first)+i), nil, []byte(p))
		}
		return sg
	}
	segs := []popSegment{segment(1, "a", "b", "c"), segment(4, strings.Repeat("d", 100), "e")}
	pid := uuid.New()
	cases := []struct {
		name   string
		spec   queen.PopSpec
		cursor int64
		want   []int64 // offsets
		cut    bool
		read   int   // the segments read (0: both)
		end    int64 // the partition's last offset (0: 5)
	}{
		{"above the cursor", queen.PopSpec{Batch: 10}, 2, []int64{3, 4, 5}, false, 0, 0},
		{"at most Batch", queen.PopSpec{Batch: 2}, 0, []int64{1, 2}, true, 0, 0},
		{"all consumed", queen.PopSpec{Batch: 10}, 5, nil, false, 0, 0},
		{"MaxBytes stops the span", queen.PopSpec{Batch: 10, MaxBytes: 2*queen.PopMessageOverhead + 2}, 0, []int64{1, 2}, true, 0, 0},
		{"the first message always fits", queen.PopSpec{Batch: 10, MaxBytes: 1}, 3, []int64{4}, true, 0, 0},
		{"BytesStrict binds the first", queen.PopSpec{Batch: 10, MaxBytes: queen.PopMessageOverhead + 99, BytesStrict: true}, 3, nil, false, 0, 0},
		{"a message past the bound is not skipped over", queen.PopSpec{Batch: 10, MaxBytes: 2*queen.PopMessageOverhead + 2}, 2, []int64{3}, true, 0, 0},
		{"a batch that ends at the partition's end is whole", queen.PopSpec{Batch: 3}, 2, []int64{3, 4, 5}, false, 0, 0},
		{"a batch that ends at the last segment read, the partition going on, is cut", queen.PopSpec{Batch: 3}, 0, []int64{1, 2, 3}, true, 1, 0},
		{"the last segment read, short of the batch, ends what is visible", queen.PopSpec{Batch: 4}, 0, []int64{1, 2, 3}, false, 1, 0},
		{"a batch that ends at the partition's last offset read is whole", queen.PopSpec{Batch: 3}, 0, []int64{1, 2, 3}, false, 1, 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.spec.PartitionID, c.spec.Group = pid, "g"
			st := consumerState{cursor: c.cursor, lastOffset: 5, queue: "q", partition: "p", failCounts: map[int64]int32{4: 2}}
			if c.end > 0 {
				st.lastOffset = c.end
			}
			read := segs
			if c.read > 0 {
				read = segs[:c.read]
			}
			res, last, cut, err := spanMessages(c.spec, &st, read)
			require.NoError(t, err)
			require.Equal(t, c.cut, cut, "cut")
			var got []int64
			for _, m := range res.Messages {
				got = append(got, m.Offset)
				require.Equal(t, int(st.failCounts[m.Offset]), m.RetryCount)
				require.Equal(t, "q", m.Queue)
				require.Equal(t, pid.String(), m.PartitionID)
			}
			require.Equal(t, c.want, got)
			if len(c.want) == 0 {
				require.Empty(t, res.Queue+res.Partition+res.PartitionID+res.ConsumerGroup)
				return
			}
			require.Equal(t, c.want[len(c.want)-1], last)
			require.Equal(t, []string{"q", "p", pid.String(), "g"}, []string{res.Queue, res.Partition, res.PartitionID, res.ConsumerGroup})
		})
	}
	bad := segment(1, "a")
	_, _, _, err := spanMessages(queen.PopSpec{PartitionID: pid, Batch: 1}, &consumerState{}, []popSegment{{first: 1, ids: bad.ids, frames: bad.frames[:1]}})
	require.ErrorIs(t, err, ErrCorruptSegment)
}
