// Package storetest holds the store test kit (river's riverdrivertest is
// the model): MemStore, an in-memory store that answers the push and
// consume calls of persistence.Store (actors.Store, consume.Store, in the
// kernel's store protocol) as PostgreSQL does (SPEC.md §3, §4),
// for the tests of the packages above persistence (actors, consume); and
// RunSuite, the cases every store must pass, run by persistence's tests
// against PostgreSQL and by this package's against MemStore. PostgreSQL
// and SPEC.md are the truth: where MemStore differs, MemStore is wrong.
// It is imported by tests only.
package storetest
