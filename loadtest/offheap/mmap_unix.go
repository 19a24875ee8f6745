//go:build unix

package offheap

import (
	"runtime"
	"syscall"
)

// mapAnon maps size zeroed bytes (an anonymous private mapping, page
// aligned), unmapped when owner becomes unreachable; nil if the mapping
// fails.
func mapAnon[T any](owner *T, size int) []byte {
	mem, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return nil
	}
	runtime.AddCleanup(owner, func(m []byte) { _ = syscall.Munmap(m) }, mem)
	return mem
}
