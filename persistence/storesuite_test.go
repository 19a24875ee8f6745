package persistence_test

import (
	"context"
	"testing"

	"github.com/queen-mq/queen-go/internal/storetest"
	"github.com/queen-mq/queen-go/persistence"
	"github.com/queen-mq/queen-go/persistence/pgtest"
)

// TestStoreSuite runs the shared store cases (storetest.RunSuite) against
// PostgreSQL, one fresh database per case: the same cases the in-memory
// store the packages above persistence test with must pass.
func TestStoreSuite(t *testing.T) {
	storetest.RunSuite(t, func(t *testing.T) storetest.Store {
		s, err := persistence.Open(context.Background(), persistence.Config{URL: pgtest.NewDatabase(t)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		return s
	})
}
