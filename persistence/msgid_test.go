package persistence

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	queen "github.com/queen-mq/queen-go"
)

// A derived message id is a UUIDv7 of the segment's stamp, the same for the
// same (partition, offset, stamp), and different for every offset.
func TestMessageIDDerived(t *testing.T) {
	pid := uuid.MustParse("0190b6a4-7d2e-7c3a-8f00-123456789abc")
	at := time.Date(2026, 12, 5, 21, 30, 0, 123_456_789, time.UTC)
	id := messageID(pid, 7, at)
	require.Equal(t, uuid.Version(7), id.Version())
	require.Equal(t, uuid.RFC4122, id.Variant())
	sec, nsec := id.Time().UnixTime()
	require.Equal(t, at.UnixMilli(), sec*1000+nsec/1_000_000, "its time is the stamp's millisecond")
	require.Equal(t, id, messageID(pid, 7, at.Truncate(time.Microsecond)), "PostgreSQL's microseconds derive the same id")
	seen := map[uuid.UUID]bool{}
	for off := int64(0); off < 10_000; off++ {
		x := messageID(pid, off, at)
		require.False(t, seen[x], "offset %d", off)
		seen[x] = true
	}
	require.NotEqual(t, id, messageID(uuid.New(), 7, at), "another partition")
	require.Equal(t, uuid.UUID{}, uuid.UUID(originalID(pid, 7, at, nil)), "a gone segment names the zero id")
	stored := uuid.New()
	require.Equal(t, stored, originalID(pid, 7, at, stored[:]), "a legacy segment's stored id")
	require.Equal(t, id, originalID(pid, 7, at, []byte{}), "a derived one")
}

// Frames walked with derived ids get one id per frame, from the segment's
// first offset on.
func TestWalkFramesDerivesIDs(t *testing.T) {
	pid, at := uuid.New(), time.Now()
	var frames []byte
	for _, txn := range []string{"a", "b", "c"} {
		frames = AppendFrame(frames, txn, nil, []byte(`{}`))
	}
	for _, stored := range [][]byte{frames, packSegment(append(frames, frames...))} {
		fs, err := UnpackFrames(SegmentIDs{Partition: pid, First: 40, At: at}, stored)
		require.NoError(t, err)
		require.NotEmpty(t, fs)
		for k, f := range fs {
			require.Equal(t, messageID(pid, 40+int64(k), at), f.MessageID)
		}
	}
}

// Layout 3 (migration 0022) in the database: a push stores no id (the
// row's legacy_ids is empty), pop and peek answer the ids the push did, a
// segment that still stores its ids (written before) reads them, and the
// previous release's COPY, which names message_ids, fails: an older broker
// fails closed rather than hand out ids no reader derives.
func TestDerivedIDsStored(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	pid, err := s.EnsurePartition(ctx, "ids", "p")
	require.NoError(t, err)
	out := commit(t, s, pid, items("ids", "p", "a", "b"))
	var n int
	require.NoError(t, s.pool.QueryRow(ctx, `SELECT count(*) FROM queen.segments WHERE partition_num = (SELECT num FROM queen.partitions WHERE id = $1) AND octet_length(legacy_ids) = 0`, pid).Scan(&n))
	require.Equal(t, 1, n)
	legacy := []uuid.UUID{uuid.New(), uuid.New()}
	var frames []byte
	for _, txn := range []string{"c", "d"} {
		frames = AppendFrame(frames, txn, nil, []byte(`{}`))
	}
	_, err = s.pool.Exec(ctx, `INSERT INTO queen.segments (partition_num, first_offset, last_offset, created_at, legacy_ids, frames)
		SELECT num, 2, 3, clock_timestamp(), $2, $3 FROM queen.partitions WHERE id = $1`, pid, append(legacy[0][:], legacy[1][:]...), frames)
	require.NoError(t, err)
	_, err = s.pool.Exec(ctx, `UPDATE queen.partition_ends SET last_offset = 3 WHERE partition_id = $1`, pid)
	require.NoError(t, err)
	pk, err := s.Peek(ctx, queen.PeekQuery{Queue: "ids", Partition: "p", After: -1})
	require.NoError(t, err)
	require.Len(t, pk.Messages, 4)
	want := []string{out.Results[0].MessageID.String(), out.Results[1].MessageID.String(), legacy[0].String(), legacy[1].String()}
	for i, m := range pk.Messages {
		require.Equal(t, want[i], m.ID, "message %d", i)
	}
	_, err = s.pool.CopyFrom(ctx, pgx.Identifier{"queen", "segments"},
		[]string{"partition_id", "first_offset", "last_offset", "created_at", "message_ids", "frames", "hashes", "timed", "producer_sub"},
		pgx.CopyFromRows([][]any{{pid, int64(4), int64(4), time.Now(), legacy[0][:], frames, []byte{}, false, ""}}))
	// (It names partition_id too, gone since migration 0025: the first
	// column missing is the one reported.)
	require.ErrorContains(t, err, "42703", "0.4.x's COPY fails: a column it names does not exist")
}
