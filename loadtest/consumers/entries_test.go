package consumers

import (
	"maps"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/queen-mq/queen-go/loadtest/txnid"
)

func TestEntrySizeIs16Bytes(t *testing.T) {
	require.Equal(t, int64(16), entrySize)
}

func TestEntriesGetPutAll(t *testing.T) {
	tab := newEntries()
	require.Equal(t, consEntry{}, tab.get(txnid.MakeKey(3, 7)))
	tab.put(txnid.MakeKey(3, 7), consEntry{})
	require.Zero(t, tab.mapped.Load(), "a zero entry maps nothing")

	want := map[uint64]consEntry{}
	for part := range 3 {
		// Offsets across chunk boundaries, a far one, and the highest.
		for _, off := range []uint64{0, 1, entryChunk - 1, entryChunk, 5*entryChunk + 3, 1 << 30, txnid.SeqMask} {
			k := txnid.MakeKey(part, off)
			e := consEntry{txn: uint32(part*1000) + uint32(off%1000) + 1, popped: 1, handled: uint8(part)}
			tab.put(k, e)
			want[k] = e
		}
	}
	for k, e := range want {
		require.Equal(t, e, tab.get(k))
	}
	require.Equal(t, consEntry{}, tab.get(txnid.MakeKey(1, 2)), "a neighbour in a mapped chunk is still zero")
	require.Equal(t, want, maps.Collect(tab.all()))
	// 3 partitions × 5 chunks (0–255, 256…, 1283, 1<<30, SeqMask).
	require.Equal(t, 3*5*entryChunk*entrySize, tab.mapped.Load())

	// Overwriting with zero drops the entry from all().
	k := txnid.MakeKey(2, entryChunk)
	tab.put(k, consEntry{})
	delete(want, k)
	require.Equal(t, want, maps.Collect(tab.all()))
	require.Equal(t, consEntry{}, tab.get(k))
}

func TestEntriesSpanSlabs(t *testing.T) {
	tab := newEntries()
	// More chunks than one slab holds.
	n := slabChunks + 10
	for c := range n {
		tab.put(txnid.MakeKey(c, 0), consEntry{txn: uint32(c) + 1})
	}
	for c := range n {
		require.Equal(t, uint32(c)+1, tab.get(txnid.MakeKey(c, 0)).txn)
	}
	require.Equal(t, int64(n)*entryChunk*entrySize, tab.mapped.Load())
}

func TestEntriesReleaseReusesChunks(t *testing.T) {
	tab := newEntries()
	for off := range uint64(3 * entryChunk) {
		tab.put(txnid.MakeKey(1, off), consEntry{txn: uint32(off) + 1})
	}
	require.Equal(t, 3*entryChunk*entrySize, tab.mapped.Load())
	first := txnid.MakeKey(1, 0) >> entryChunkBits
	tab.release(first)
	tab.release(first) // no-op
	require.Equal(t, 2*entryChunk*entrySize, tab.mapped.Load())
	require.Equal(t, consEntry{}, tab.get(txnid.MakeKey(1, 5)))
	require.Equal(t, uint32(entryChunk+6), tab.get(txnid.MakeKey(1, entryChunk+5)).txn)
	slab := len(tab.slab)
	// The next new chunk is the released one, zeroed.
	tab.put(txnid.MakeKey(2, 7), consEntry{txn: 9})
	require.Equal(t, slab, len(tab.slab), "a released chunk is reused before the slab")
	require.Equal(t, consEntry{}, tab.get(txnid.MakeKey(2, 5)))
	require.Equal(t, uint32(9), tab.get(txnid.MakeKey(2, 7)).txn)
	require.Equal(t, 3*entryChunk*entrySize, tab.mapped.Load())
}
