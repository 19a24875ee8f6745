//go:build !unix

package audit

// newChunk returns a zeroed ledger chunk of chunkSeqs/16 words.
func newChunk(*Ledger) []uint64 { return make([]uint64, chunkSeqs/16) }
