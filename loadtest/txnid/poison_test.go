package txnid

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPoisonRule(t *testing.T) {
	t.Parallel()
	const n = 200000
	var hits int
	for i := range n {
		txn := string(AppendTxn(nil, i%8, uint64(i)))
		p := IsPoison(txn, 0.05)
		require.Equal(t, p, IsPoison(txn, 0.05), "deterministic")
		require.False(t, IsPoison(txn, 0))
		require.True(t, IsPoison(txn, 1))
		if p {
			hits++
			require.True(t, IsPoison(txn, 0.5), "a larger ratio keeps every poison message poison")
		}
	}
	require.InDelta(t, 0.05, float64(hits)/n, 0.003)
}
