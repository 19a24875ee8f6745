package offheap

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
)

type owner struct{ words []uint64 }

type record struct {
	a uint32
	b [12]uint8
}

func TestSliceIsZeroedWritableAndOffHeap(t *testing.T) {
	if mapAnon(&owner{}, 8) == nil {
		t.Skip("no anonymous mappings here: Slice allocates on the Go heap")
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	o := &owner{}
	const n = 1 << 20 // 8 MiB of uint64
	o.words = Slice[uint64](o, n)
	require.Len(t, o.words, n)
	for i := range o.words {
		require.Zero(t, o.words[i])
		o.words[i] = uint64(i)
	}
	require.Equal(t, uint64(n-1), o.words[n-1])
	runtime.ReadMemStats(&after)
	// On the heap the slice alone would add 8 MiB.
	require.Less(t, after.HeapAlloc, before.HeapAlloc+4<<20, "the slice is on the Go heap")
	runtime.KeepAlive(o)
}

func TestSliceOfStructs(t *testing.T) {
	o := &owner{}
	rs := Slice[record](o, 100)
	require.Len(t, rs, 100)
	rs[99] = record{a: 7, b: [12]uint8{11: 9}}
	require.Equal(t, record{a: 7, b: [12]uint8{11: 9}}, rs[99])
	require.Equal(t, record{}, rs[0])
	runtime.KeepAlive(o)
}
