//go:build unix

package audit

import (
	"runtime"
	"syscall"
	"unsafe"
)

// newChunk returns a zeroed ledger chunk of chunkSeqs/16 words mapped outside
// the Go heap (an anonymous private mapping), released when owner becomes
// unreachable. Off the heap, the ledger's few bits per id add only their own
// size to the process's RSS: on the heap they would raise the collector's
// goal by GOGC times their size (queen runs at GOGC 200), which with
// --embedded shows as broker memory growing with the run's length.
// It falls back to the Go heap if the mapping fails.
func newChunk(owner *Ledger) []uint64 {
	const size = chunkSeqs / 16 * 8
	mem, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return make([]uint64, chunkSeqs/16)
	}
	runtime.AddCleanup(owner, func(m []byte) { _ = syscall.Munmap(m) }, mem)
	return unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(mem))), chunkSeqs/16)
}
