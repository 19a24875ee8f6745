// Package offheap maps the load harness's per-message audit records outside
// the Go heap.
//
// A harness run keeps a few bits to a few bytes per message it sent or
// consumed, for the audits (SPEC.md §12): millions of entries in a run of
// minutes. On the Go heap they would raise the collector's goal by GOGC
// times their size (queen runs at GOGC 200) and, with --embedded, count
// against the broker's soft memory limit, so that the broker's collector
// runs more and more often as the run goes on. Mapped outside the heap they
// add only their own size to the process's RSS, and the collector never
// scans them.
//
// It is a leaf: it imports nothing of the harness.
package offheap
