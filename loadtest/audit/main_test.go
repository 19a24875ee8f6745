package audit

import (
	"context"
	"testing"

	"github.com/queen-mq/queen-go/persistence"
	"github.com/queen-mq/queen-go/persistence/pgtest"
)

func TestMain(m *testing.M) {
	pgtest.SetTemplate(func(ctx context.Context, url string) error {
		_, err := persistence.Migrate(ctx, url)
		return err
	})
	pgtest.Main(m)
}
