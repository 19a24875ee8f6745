package persistence

import (
	"context"
	"testing"

	"github.com/queen-mq/queen-go/persistence/pgtest"
)

func TestMain(m *testing.M) {
	pgtest.SetTemplate(func(ctx context.Context, url string) error {
		_, err := Migrate(ctx, url)
		return err
	})
	pgtest.Main(m)
}

// setup returns a Store on a fresh migrated database.
func setup(t testing.TB) *Store {
	t.Helper()
	ctx := context.Background()
	s, err := Open(ctx, Config{URL: pgtest.NewDatabase(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}
