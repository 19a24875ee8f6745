//go:build !unix

package loadtest

// newChunk returns a zeroed ledger chunk of chunkSeqs/16 words.
func newChunk(*ledger) []uint64 { return make([]uint64, chunkSeqs/16) }
