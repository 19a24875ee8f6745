package audit

import (
	"math/bits"
	"sync/atomic"
)

// DirtySet marks partitions (by index) that may hold segments the audit has
// not read: the producers mark a partition when an answer for an item sent
// there comes back, the auditor takes the marks before each pass. Marking
// is one atomic load (and an atomic OR the first time) on a bitset, safe
// from any goroutine; take runs on one goroutine at a time.
type DirtySet struct {
	words []atomic.Uint64
	// taken is the last take's words, for marked.
	taken []uint64
}

// NewDirtySet is an empty set of n partitions (indexes 0..n-1).
func NewDirtySet(n int) *DirtySet {
	w := (n + 63) / 64
	return &DirtySet{words: make([]atomic.Uint64, w), taken: make([]uint64, w)}
}

// Mark sets partition i's mark (0 <= i < n of NewDirtySet). A nil set
// marks nothing.
func (d *DirtySet) Mark(i int) {
	if d == nil {
		return
	}
	w, bit := &d.words[i>>6], uint64(1)<<(i&63)
	if w.Load()&bit == 0 {
		w.Or(bit)
	}
}

// take clears every mark, calls add (when not nil) with each partition that
// was marked, in index order, and returns a test of whether partition i was
// among them (valid until the next take). A mark set while take runs is
// either taken now or left for the next take, never lost.
func (d *DirtySet) take(add func(i int)) (marked func(i int) bool) {
	for k := range d.words {
		v := uint64(0)
		if d.words[k].Load() != 0 {
			v = d.words[k].Swap(0)
		}
		d.taken[k] = v
		for b := v; b != 0 && add != nil; b &= b - 1 {
			add(k<<6 | bits.TrailingZeros64(b))
		}
	}
	return func(i int) bool { return d.taken[i>>6]&(uint64(1)<<(i&63)) != 0 }
}
