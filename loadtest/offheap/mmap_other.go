//go:build !unix

package offheap

// mapAnon has no anonymous mappings to offer here: nil (Slice allocates on
// the Go heap).
func mapAnon[T any](*T, int) []byte { return nil }
