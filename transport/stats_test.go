package transport

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// storagePerMessage: growth of the storage gauges between their oldest read
// in the kept samples and the current one, over the messages stored between
// those reads; nothing before two reads with messages between them, and no
// database figure when it shrank.
func TestStoragePerMessage(t *testing.T) {
	t.Parallel()
	unread := statsSample{}
	a := statsSample{wal: 1_000_000, db: 50_000_000, stored: 1_000}
	b := statsSample{wal: 1_500_000, db: 50_400_000, stored: 2_000}
	c := statsSample{wal: 2_000_000, db: 50_800_000, stored: 3_000}

	wal, db := storagePerMessage(nil, a)
	require.Nil(t, wal, "one read")
	require.Nil(t, db)
	wal, db = storagePerMessage([]statsSample{unread, a}, a)
	require.Nil(t, wal, "no message stored between the reads")
	require.Nil(t, db)
	wal, db = storagePerMessage([]statsSample{unread, a, b}, c)
	require.NotNil(t, wal)
	require.NotNil(t, db)
	require.InDelta(t, 500, *wal, 1e-9, "from the oldest read: (2,000,000 - 1,000,000) / 2,000")
	require.InDelta(t, 400, *db, 1e-9)

	shrunk := statsSample{wal: 2_500_000, db: 40_000_000, stored: 4_000}
	wal, db = storagePerMessage([]statsSample{a}, shrunk)
	require.InDelta(t, 500, *wal, 1e-9)
	require.Nil(t, db, "retention dropped more than was written")
}
