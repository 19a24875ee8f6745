package actors

import (
	"encoding/binary"
	"math/bits"
	"slices"
	"time"

	queen "github.com/queen-mq/queen-go"
)

// filter is a blocked Bloom filter over XXH3-128 transactionId hashes: the
// dedup cache's compact form (SPEC.md §8 allows a lossy cache). Test never
// answers false for a hash that was added; it answers true for a hash that
// was not added with a probability of about 0.1% at capacity (false
// positives only make a hash a suspect, looked up by the SQL probe).
//
// The hashes are already uniform (XXH3-128), so no hashing is done here: the
// first 64 bits choose a 512-bit block (one cache line), the last 64 bits
// the filterK bits inside it by double hashing. filterBitsPerKey bits per
// key at capacity: 2 bytes per in-window hash.
type filter struct {
	blocks   [][8]uint64
	n, limit int // keys added, capacity
}

const (
	filterBitsPerKey = 16
	filterK          = 11
	// filterMinKeys is the smallest capacity (one 64-byte block): a
	// partition's first generation starts there and grows by doubling.
	filterMinKeys = 32
	// filterStructBytes is a filter's fixed cost beside its blocks (the
	// struct in its generation's slice, rounded up).
	filterStructBytes = 64
)

// newFilter returns an empty filter for about keys hashes.
func newFilter(keys int) filter {
	keys = max(keys, filterMinKeys)
	nb := (keys*filterBitsPerKey + 511) / 512
	return filter{blocks: make([][8]uint64, nb), limit: nb * 512 / filterBitsPerKey}
}

func (f *filter) full() bool { return f.n >= f.limit }

// bytes is the filter's memory.
func (f *filter) bytes() int64 { return int64(len(f.blocks))*64 + filterStructBytes }

func (f *filter) add(h *queen.Hash) {
	b, a, d := f.at(h)
	for i := uint64(0); i < filterK; i++ {
		p := (a + i*d) & 511
		b[p>>6] |= 1 << (p & 63)
	}
	f.n++
}

func (f *filter) test(h *queen.Hash) bool {
	b, a, d := f.at(h)
	for i := uint64(0); i < filterK; i++ {
		p := (a + i*d) & 511
		if b[p>>6]&(1<<(p&63)) == 0 {
			return false
		}
	}
	return true
}

// at returns h's block and the start and step of its bit positions.
func (f *filter) at(h *queen.Hash) (*[8]uint64, uint64, uint64) {
	h1 := binary.LittleEndian.Uint64(h[0:8])
	h2 := binary.LittleEndian.Uint64(h[8:16])
	blk, _ := bits.Mul64(h1, uint64(len(f.blocks)))
	return &f.blocks[blk], h2 & 511, (h2>>9)&511 | 1
}

// printSet is the fingerprints of the hashes a partition stored from since
// to until (queen.PrintSet), sorted: what a hydration reads back for
// segments retention removed inside the window. A hash whose first four
// bytes are among them may be there (a suspect, looked up in that span);
// one whose are not is not.
type printSet struct {
	since, until time.Time
	keys         []uint32
}

// printSetBytes is a printSet's fixed cost beside its keys.
const printSetBytes = 72

func newPrintSet(s queen.PrintSet) printSet {
	keys := make([]uint32, len(s.Prints)/4)
	for i := range keys {
		keys[i] = binary.BigEndian.Uint32(s.Prints[i*4:])
	}
	slices.Sort(keys)
	return printSet{since: s.Since, until: s.Until, keys: keys}
}

func (s *printSet) test(h *queen.Hash) bool {
	_, ok := slices.BinarySearch(s.keys, binary.BigEndian.Uint32(h[0:4]))
	return ok
}

func (s *printSet) bytes() int64 { return printSetBytes + 4*int64(cap(s.keys)) }
