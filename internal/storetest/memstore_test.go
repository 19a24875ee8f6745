package storetest

import "testing"

// TestMemStoreSuite runs the shared store cases against MemStore (the same
// cases persistence's TestStoreSuite runs against PostgreSQL).
func TestMemStoreSuite(t *testing.T) {
	RunSuite(t, func(*testing.T) Store { return NewMem() })
}
