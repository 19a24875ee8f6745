package audit

import (
	"math/rand"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPendingSetMatchesAMap drives the ring with the shapes the ledger
// sees (ids put roughly in order, resolved a pass later, a few never
// resolved, some out of order, jumps past the ring's maximum) and checks
// every answer against a plain map.
func TestPendingSetMatchesAMap(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	var s pendingSet
	model := map[uint64]pendingID{}
	var next uint64
	for step := 0; step < 400_000; step++ {
		var seq uint64
		switch r := rng.Intn(100); {
		case r < 55: // the next id answered
			seq = next
			next++
		case r < 60 && next > 0: // an older id, out of order
			seq = next - 1 - uint64(rng.Intn(int(min(next, 300_000))))
		case r < 61: // a jump far ahead
			next += uint64(rng.Intn(3 * pendMaxSlots))
			seq = next
		default: // resolve something recent
			if next == 0 {
				continue
			}
			seq = next - 1 - uint64(rng.Intn(int(min(next, 20_000))))
			_, inModel := model[seq]
			_, inSet := s.get(seq)
			require.Equal(t, inModel, inSet, "seq %d", seq)
			delete(model, seq)
			s.del(seq)
			continue
		}
		p := pendingID{fromStore: rng.Intn(2) == 0}
		p.id[0], p.id[1] = byte(seq), byte(seq>>8)
		model[seq] = p
		s.put(seq, p)
		got, ok := s.get(seq)
		require.True(t, ok)
		require.Equal(t, p, got)
		require.Equal(t, len(model), s.len())
	}
	for seq, p := range model {
		got, ok := s.get(seq)
		require.True(t, ok, "seq %d", seq)
		require.Equal(t, p, got)
	}
	require.LessOrEqual(t, len(s.slots), pendMaxSlots)
	for seq := range model {
		s.del(seq)
	}
	require.Zero(t, s.len())
}
