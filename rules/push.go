package rules

import (
	"github.com/google/uuid"

	queen "github.com/queen-mq/queen-go"
)

// Leaders maps every item to the first item with the same hash (its
// leader): the leader/follower rule for repeats inside one request
// (SPEC.md §3). out[i] == i for a leader.
func Leaders(items []*queen.Item) []int32 {
	out := make([]int32, len(items))
	seen := make(map[queen.Hash]int32, len(items))
	for i, it := range items {
		if l, ok := seen[it.Hash]; ok {
			out[i] = l
			continue
		}
		seen[it.Hash] = int32(i)
		out[i] = int32(i)
	}
	return out
}

// Original is a stored message the probe found for a hash within the
// window: its offset and message id.
type Original struct {
	Offset    int64
	MessageID uuid.UUID
}

// Assign gives the items of one partition's push their verdicts, under the
// partition's row lock (SPEC.md §3), into results (len(items), each with
// PartitionID set to partition):
//   - with window > 0, a follower (leaderOf[i] != i) is a duplicate of its
//     leader (the leader's message id and offset, whatever the leader's
//     verdict); a leader the probe found (find) is a duplicate of that
//     original;
//   - every other item (every item when window is 0) is queued: offsets
//     last+1, last+2, ... in item order, each message id newID(its offset).
//
// leaderOf nil means every item leads. It returns how many items are
// queued: their offsets are last+1 to last+queued.
func Assign(results []queen.Result, items []*queen.Item, leaderOf []int32, partition uuid.UUID, window, last int64,
	find func(queen.Hash) (Original, bool), newID func(offset int64) uuid.UUID) (queued int) {
	next := last + 1
	for i, it := range items {
		r := &results[i]
		if window > 0 {
			if leaderOf != nil && int(leaderOf[i]) != i {
				lr := results[leaderOf[i]]
				*r = queen.Result{Verdict: queen.Duplicate, MessageID: lr.MessageID, PartitionID: partition, Offset: lr.Offset}
				continue
			}
			if o, ok := find(it.Hash); ok {
				*r = queen.Result{Verdict: queen.Duplicate, MessageID: o.MessageID, PartitionID: partition, Offset: o.Offset}
				continue
			}
		}
		*r = queen.Result{Verdict: queen.Queued, MessageID: newID(next), PartitionID: partition, Offset: next}
		next++
	}
	return int(next - last - 1)
}
