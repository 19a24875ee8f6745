package persistence

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stretchr/testify/require"
)

// TestPoolEncodesUUIDsInBinary: the pool's connections encode uuid.UUID
// (alone and as the elements of the pops' and acks' uuid[] arguments) with
// PostgreSQL's uuid codec, not through driver.Valuer (a string per id,
// planned and parsed again for each element), and scan them back.
func TestPoolEncodesUUIDsInBinary(t *testing.T) {
	s := setup(t)
	ctx := context.Background()
	conn, err := s.pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	tm := conn.Conn().TypeMap()
	plan := tm.PlanEncode(pgtype.UUIDOID, pgtype.BinaryFormatCode, uuid.New())
	require.NotNil(t, plan)
	require.NotContains(t, fmt.Sprintf("%T", plan), "DriverValuer", "uuid.UUID goes through driver.Valuer")

	ids := []uuid.UUID{uuid.New(), uuid.New(), uuid.New()}
	var back []uuid.UUID
	require.NoError(t, conn.QueryRow(ctx, "SELECT $1::uuid[]", ids).Scan(&back))
	require.Equal(t, ids, back)
	var one uuid.UUID
	require.NoError(t, conn.QueryRow(ctx, "SELECT $1::uuid", ids[1]).Scan(&one))
	require.Equal(t, ids[1], one)
}
