package offheap

import "unsafe"

// Slice returns n zeroed elements of E mapped outside the Go heap, released
// when owner becomes unreachable (runtime.AddCleanup): the caller keeps the
// slice, and anything pointing into it, reachable only from owner.
//
// E must hold no Go pointers (the collector does not scan the mapping) and
// n must be positive. Where the platform has no anonymous mappings, or the
// mapping fails, the elements are allocated on the Go heap instead.
func Slice[E, T any](owner *T, n int) []E {
	var e E
	size := int(unsafe.Sizeof(e)) * n
	if mem := mapAnon(owner, size); mem != nil {
		return unsafe.Slice((*E)(unsafe.Pointer(unsafe.SliceData(mem))), n)
	}
	return make([]E, n)
}
