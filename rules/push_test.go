package rules

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	queen "github.com/queen-mq/queen-go"
)

func TestLeaders(t *testing.T) {
	its := func(txns ...string) []*queen.Item {
		out := make([]*queen.Item, len(txns))
		for i, x := range txns {
			out[i] = &queen.Item{TransactionID: x, Hash: queen.HashTxn(x)}
		}
		return out
	}
	require.Equal(t, []int32{0, 1, 0, 1, 4}, Leaders(its("a", "b", "a", "b", "c")))
	require.Equal(t, []int32{}, Leaders(nil))
}

func TestAssign(t *testing.T) {
	part := uuid.MustParse("0192f0c4-0000-7000-8000-0000000000aa")
	orig := uuid.MustParse("0192f0c4-0000-7000-8000-0000000000bb")
	items := func(txns ...string) []*queen.Item {
		out := make([]*queen.Item, len(txns))
		for i, x := range txns {
			out[i] = &queen.Item{TransactionID: x, Hash: queen.HashTxn(x)}
		}
		return out
	}
	// ids are handed out 1, 2, 3, ... in the order Assign asks.
	newIDs := func() func(int64) uuid.UUID {
		n := byte(0)
		return func(int64) uuid.UUID { n++; return uuid.UUID{15: n} }
	}
	id := func(n byte) uuid.UUID { return uuid.UUID{15: n} }
	stored := map[queen.Hash]Original{queen.HashTxn("old"): {Offset: 7, MessageID: orig}}
	find := func(h queen.Hash) (Original, bool) { o, ok := stored[h]; return o, ok }
	q := func(n byte, off int64) queen.Result {
		return queen.Result{Verdict: queen.Queued, MessageID: id(n), PartitionID: part, Offset: off}
	}
	dup := func(m uuid.UUID, off int64) queen.Result {
		return queen.Result{Verdict: queen.Duplicate, MessageID: m, PartitionID: part, Offset: off}
	}

	for _, tc := range []struct {
		name   string
		txns   []string
		window int64
		last   int64
		want   []queen.Result
		queued int
	}{{
		name: "new items get the next offsets in item order", txns: []string{"a", "b", "c"}, window: 60, last: 9,
		want: []queen.Result{q(1, 10), q(2, 11), q(3, 12)}, queued: 3,
	}, {
		name: "an original in the window makes a duplicate", txns: []string{"a", "old", "b"}, window: 60, last: -1,
		want: []queen.Result{q(1, 0), dup(orig, 7), q(2, 1)}, queued: 2,
	}, {
		name: "followers echo their leader, new or duplicate", txns: []string{"a", "a", "old", "old", "a"}, window: 60, last: 3,
		want: []queen.Result{q(1, 4), dup(id(1), 4), dup(orig, 7), dup(orig, 7), dup(id(1), 4)}, queued: 1,
	}, {
		name: "window 0: every item is queued, repeats and originals too", txns: []string{"a", "a", "old"}, window: 0, last: 0,
		want: []queen.Result{q(1, 1), q(2, 2), q(3, 3)}, queued: 3,
	}, {
		name: "nothing to push", txns: nil, window: 60, last: 5, want: []queen.Result{}, queued: 0,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			its := items(tc.txns...)
			results := make([]queen.Result, len(its))
			n := Assign(results, its, Leaders(its), part, tc.window, tc.last, find, newIDs())
			require.Equal(t, tc.queued, n)
			require.Equal(t, tc.want, results)
		})
	}
	// Without leaders every item leads.
	its := items("a", "a")
	results := make([]queen.Result, 2)
	require.Equal(t, 2, Assign(results, its, nil, part, 60, -1, find, newIDs()))
	require.Equal(t, []queen.Result{q(1, 0), q(2, 1)}, results)
}
