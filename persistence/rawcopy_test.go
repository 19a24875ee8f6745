package persistence

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

func TestRawWriter(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	w, err := OpenRaw(ctx, s.pool.Config().ConnString())
	require.NoError(t, err)
	defer w.Close()

	require.NoError(t, w.Reset(ctx, "lt_1"))
	rows := make([]RawMessage, 50)
	for i := range rows {
		rows[i] = RawMessage{ID: uuid.Must(uuid.NewV7()), Queue: "q", Partition: fmt.Sprintf("p-%d", i%4), TransactionID: fmt.Sprintf("t-%d", i%10), Payload: []byte(fmt.Sprintf(`{"i":%d}`, i))}
	}
	n, err := w.CopyMessages(ctx, "lt_1", rows)
	require.NoError(t, err)
	require.Equal(t, int64(50), n)
	n, err = w.CopyMessages(ctx, "lt_1", rows[:0])
	require.NoError(t, err)
	require.Zero(t, n)
	cnt, err := w.Count(ctx, "lt_1")
	require.NoError(t, err)
	require.Equal(t, int64(50), cnt, "one row per message, repeated transaction ids included")

	var payload string
	var stamped bool
	require.NoError(t, s.pool.QueryRow(ctx, `SELECT payload::text, created_at IS NOT NULL FROM queen_raw.lt_1 WHERE id = $1`, rows[7].ID).Scan(&payload, &stamped))
	require.JSONEq(t, `{"i":7}`, payload)
	require.True(t, stamped)

	// Reset gives a fresh, empty table.
	require.NoError(t, w.Reset(ctx, "lt_1"))
	cnt, err = w.Count(ctx, "lt_1")
	require.NoError(t, err)
	require.Zero(t, cnt)

	require.NoError(t, w.Drop(ctx, "lt_1"))
	_, err = w.Count(ctx, "lt_1")
	require.Error(t, err)

	for _, bad := range []string{"", "Lt", "a-b", `x"; DROP TABLE queen.segments; --`} {
		require.Error(t, w.Reset(ctx, bad), bad)
	}
}
