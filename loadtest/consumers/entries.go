package consumers

import (
	"iter"
	"sync/atomic"
	"unsafe"

	"github.com/queen-mq/queen-go/loadtest/offheap"
)

const (
	// entrySize is a consEntry's size in bytes (16).
	entrySize = int64(unsafe.Sizeof(consEntry{}))

	// entryChunkBits: one chunk of a group's record holds the entries of
	// 1<<entryChunkBits consecutive offsets of one partition, 256 entries
	// of 16 bytes (one 4 KiB page).
	entryChunkBits = 8
	entryChunk     = 1 << entryChunkBits
	// slabChunks is how many chunks one mapping holds (4 MiB).
	slabChunks = 1024
)

// entries is a consumer group's record of every message it saw, consEntry by
// key (txnid.MakeKey(partition index, offset)). The entries live in chunks
// of entryChunk consecutive offsets, carved from mappings outside the Go
// heap (loadtest/offheap): a message adds 16 bytes to the RSS and nothing
// to the collector's work, where a Go map held 30–60 bytes per message on
// the heap, and with --embedded the broker's collector ran more often as
// the run went on. A chunk every group has passed is released (release)
// and reused by the next chunk put, so the record holds the backlog, not
// the run. Not safe for concurrent use (the group's mutex guards it)
// except mapped, an atomic.
type entries struct {
	// chunks: chunk of key>>entryChunkBits.
	chunks map[uint64]*[entryChunk]consEntry
	// slab is what is left of the last mapping; free holds released
	// chunks (zeroed), taken before the slab.
	slab []consEntry
	free []*[entryChunk]consEntry
	// mapped counts the bytes of the chunks in use (a phase's groups share
	// Counters.RecordBytes).
	mapped *atomic.Int64
}

func newEntries() *entries {
	return &entries{chunks: map[uint64]*[entryChunk]consEntry{}, mapped: new(atomic.Int64)}
}

// get is the entry of key (zero if never put).
func (t *entries) get(key uint64) consEntry {
	if c := t.chunks[key>>entryChunkBits]; c != nil {
		return c[key&(entryChunk-1)]
	}
	return consEntry{}
}

// put sets the entry of key.
func (t *entries) put(key uint64, e consEntry) {
	c := t.chunks[key>>entryChunkBits]
	if c == nil {
		if e == (consEntry{}) {
			return
		}
		if n := len(t.free); n > 0 {
			c, t.free = t.free[n-1], t.free[:n-1]
		} else {
			if len(t.slab) == 0 {
				t.slab = offheap.Slice[consEntry](t, slabChunks*entryChunk)
			}
			c = (*[entryChunk]consEntry)(t.slab[:entryChunk])
			t.slab = t.slab[entryChunk:]
		}
		t.chunks[key>>entryChunkBits] = c
		t.mapped.Add(entryChunk * entrySize)
	}
	c[key&(entryChunk-1)] = e
}

// release forgets the chunk of key>>entryChunkBits == chunk (every entry
// in it): the chunk is zeroed and kept for the next put. A chunk not held
// is a no-op.
func (t *entries) release(chunk uint64) {
	c := t.chunks[chunk]
	if c == nil {
		return
	}
	*c = [entryChunk]consEntry{}
	delete(t.chunks, chunk)
	t.free = append(t.free, c)
	t.mapped.Add(-entryChunk * entrySize)
}

// all yields every non-zero entry with its key, in no order.
func (t *entries) all() iter.Seq2[uint64, consEntry] {
	return func(yield func(uint64, consEntry) bool) {
		for ck, c := range t.chunks {
			for i := range c {
				if c[i] != (consEntry{}) && !yield(ck<<entryChunkBits|uint64(i), c[i]) {
					return
				}
			}
		}
	}
}
