package queen

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPopResultJoin: the first span joined gives a multi-partition pop's
// reply its names, later spans add their messages, and each message counts
// its payload, its producer's identity and the overhead against MaxBytes.
func TestPopResultJoin(t *testing.T) {
	sub := "team-a"
	first := PopResult{Queue: "q", Partition: "p1", PartitionID: "id1", ConsumerGroup: "g",
		Messages: []Message{{Partition: "p1", Data: []byte(`{"a":1}`)}, {Partition: "p1", Data: []byte(`{}`), ProducerSub: &sub}}}
	second := PopResult{Queue: "q", Partition: "p2", PartitionID: "id2", ConsumerGroup: "g",
		Messages: []Message{{Partition: "p2", Data: []byte(`[]`)}}}
	var r PopResult
	require.Equal(t, 0, r.Join(PopResult{}), "an empty span counts nothing")
	require.Equal(t, 7+PopMessageOverhead+2+len(sub)+PopMessageOverhead, r.Join(first))
	require.Equal(t, 2+PopMessageOverhead, r.Join(second))
	require.Equal(t, "p1", r.Partition, "the first span names the reply")
	require.Equal(t, "id1", r.PartitionID)
	require.Len(t, r.Messages, 3)
	require.Equal(t, "p2", r.Messages[2].Partition)
	require.Equal(t, 5+PopMessageOverhead, PopMessageBytes(5, nil))
	require.Equal(t, 5+len(sub)+PopMessageOverhead, PopMessageBytes(5, &sub))
}
