package persistence

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/persistence/pgtest"
)

// loadPayload is a payload like the load harness's (loadtest/items.go): a
// small JSON envelope padded to 200 bytes with characters drawn from 64.
func loadPayload(r *rand.Rand, seq int) []byte {
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_"
	p := fmt.Appendf(nil, `{"producer":%d,"seq":%d,"pad":"`, r.IntN(32), seq)
	for len(p) < 198 {
		p = append(p, alphabet[r.IntN(len(alphabet))])
	}
	return append(p, '"', '}')
}

// loadSegment returns n frames like the load harness's and their message ids.
func loadSegment(n int) (frames []Frame, ids, packed []byte) {
	r := rand.New(rand.NewPCG(uint64(n), 7))
	trace := "trace-1"
	for i := range n {
		f := Frame{MessageID: uuid.New(), TransactionID: fmt.Sprintf("lt-%d-%d", r.IntN(32), 100000+i), Payload: loadPayload(r, 100000+i)}
		if i%5 == 3 {
			f.TraceID = &trace
		}
		frames = append(frames, f)
		ids = append(ids, f.MessageID[:]...)
		packed = AppendFrame(packed, f.TransactionID, f.TraceID, f.Payload)
	}
	return frames, ids, packed
}

func TestSegmentRoundTrip(t *testing.T) {
	for _, n := range []int{1, 2, 19, 500} {
		want, ids, packed := loadSegment(n)
		stored := packSegment(slices.Clone(packed))
		if n == 1 {
			require.Equal(t, packed, stored, "one frame stays raw")
		} else {
			require.True(t, compressedSegment(stored), "%d frames are compressed", n)
			require.Less(t, len(stored), len(packed))
		}
		t.Logf("%d frames: %d -> %d bytes", n, len(packed), len(stored))
		got, err := UnpackFrames(StoredIDs(ids), stored)
		require.NoError(t, err)
		require.Equal(t, want, got)
		k := 0
		require.NoError(t, walkFrames(StoredIDs(ids), stored, func(v *frameView) error {
			require.Equal(t, want[k].TransactionID, string(v.txn))
			require.Equal(t, want[k].Payload, v.payload)
			k++
			return nil
		}))
		require.Equal(t, n, k)
		p, err := FramePayload(stored, n-1)
		require.NoError(t, err)
		require.Equal(t, want[n-1].Payload, p)
	}
}

func TestSegmentStaysRawUnlessSmaller(t *testing.T) {
	// Small: not even tried.
	small := AppendFrame(nil, "a", nil, []byte(`{"i":1}`))
	require.Equal(t, small, packSegment(small))
	// Incompressible (random bytes): the zstd frame would be larger.
	r := rand.New(rand.NewPCG(1, 2))
	noise := make([]byte, 4096)
	for i := range noise {
		noise[i] = byte(r.Uint32())
	}
	raw := AppendFrame(nil, "a", nil, noise)
	require.Equal(t, raw, packSegment(raw))
}

// The form of a stored segment is told by its first four bytes: valid UTF-8
// transactionIds never make raw frames start with the zstd magic (0x28 is a
// length of 40, then 0xB5, a continuation byte, would open the
// transactionId), and raw frames that do (an invalid transactionId, which
// the transports refuse) are stored compressed whatever the sizes.
func TestMagicNumberTellsTheForms(t *testing.T) {
	for _, txn := range []string{
		"0123456789012345678901234567890123456789",
		"µ01234567890123456789012345678901234567", // U+00B5 is 0xC2 0xB5
		"日本語0123456789012345678901234567890",
	} {
		require.Len(t, txn, 40)
		require.False(t, compressedSegment(AppendFrame(nil, txn, nil, []byte(`{}`))), txn)
	}
	bad := "\xb5\x2f\xfd" + "0123456789012345678901234567890123456"
	require.Len(t, bad, 40)
	raw := AppendFrame(nil, bad, nil, []byte(`{}`))
	require.True(t, compressedSegment(raw), "the raw frames start with the magic")
	stored := packSegment(raw)
	require.NotEqual(t, raw, stored, "stored compressed although larger")
	id := uuid.New()
	got, err := UnpackFrames(StoredIDs(id[:]), stored)
	require.NoError(t, err)
	require.Equal(t, []Frame{{MessageID: id, TransactionID: bad, Payload: []byte(`{}`)}}, got)
}

func TestCorruptCompressedSegment(t *testing.T) {
	_, ids, packed := loadSegment(19)
	stored := packSegment(packed)
	require.True(t, compressedSegment(stored))
	// The frame header of a single-segment frame claiming 1 GiB of content
	// (refused before any allocation: maxSegmentBytes).
	huge := append(slices.Clone(zstdMagic), 0xA0, 0, 0, 0, 0x40, 0x01, 0, 0)
	for name, b := range map[string][]byte{
		"truncated":     stored[:len(stored)-3],
		"header only":   stored[:6],
		"magic only":    slices.Clone(zstdMagic),
		"garbage":       append(slices.Clone(zstdMagic), "not a zstd frame at all"...),
		"bad block":     append(slices.Clone(stored[:6]), 0xff, 0xff, 0xff, 0xff),
		"too large":     huge,
		"trailing junk": append(slices.Clone(stored), 1, 2, 3),
	} {
		_, err := UnpackFrames(StoredIDs(ids), b)
		require.ErrorIs(t, err, ErrCorruptSegment, name)
		_, err = FramePayload(b, 0)
		require.ErrorIs(t, err, ErrCorruptSegment, name)
		require.ErrorIs(t, walkFrames(StoredIDs(ids), b, func(*frameView) error { return nil }), ErrCorruptSegment, name)
	}
}

// compressedItems returns n push items with load-harness payloads: enough
// for their segment to be stored compressed.
func compressedItems(queueName, partition string, n int) []*queen.Item {
	r := rand.New(rand.NewPCG(uint64(n), 3))
	out := make([]*queen.Item, n)
	for i := range out {
		txn := fmt.Sprintf("%s-%d", partition, i)
		out[i] = &queen.Item{Queue: queueName, Partition: partition, TransactionID: txn, Payload: json.RawMessage(loadPayload(r, i)), Hash: queen.HashTxn(txn)}
	}
	return out
}

func storedFrames(t *testing.T, s *Store, pid uuid.UUID, first int64) []byte {
	t.Helper()
	var b []byte
	require.NoError(t, s.pool.QueryRow(context.Background(), `SELECT frames FROM queen.segments WHERE partition_num = (SELECT num FROM queen.partitions WHERE id = $1) AND first_offset = $2`, pid, first).Scan(&b))
	return b
}

// A compressed segment reads everywhere a raw one does: pops, peeks, the
// audit, dedupCheckPayload's originals, dead letters (stored raw).
func TestCompressedSegmentsReadEverywhere(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	configure(t, s, "z", `{"retryLimit":0,"dedupCheckPayload":true}`)
	pid, err := s.EnsurePartition(ctx, "z", "p")
	require.NoError(t, err)
	its := compressedItems("z", "p", 19)
	out := commit(t, s, pid, its)
	require.Equal(t, int64(18), out.LastOffset)
	require.True(t, compressedSegment(storedFrames(t, s, pid, 0)), "the segment is stored compressed")

	res, _ := pop(t, s, pid, g, 50)
	require.Len(t, res.Messages, 19)
	for i, m := range res.Messages {
		require.Equal(t, its[i].TransactionID, m.TransactionID)
		require.Equal(t, string(its[i].Payload), string(m.Data))
		require.Equal(t, out.Results[i].MessageID.String(), m.ID)
	}
	pk, err := s.Peek(ctx, queen.PeekQuery{Queue: "z", Partition: "p", After: 10, Limit: 50})
	require.NoError(t, err)
	require.Len(t, pk.Messages, 8)
	require.Equal(t, string(its[11].Payload), string(pk.Messages[0].Data))

	a, err := OpenAudit(ctx, s.pool.Config().ConnString())
	require.NoError(t, err)
	defer a.Close()
	stored, err := a.Messages(ctx, []string{"z"})
	require.NoError(t, err)
	require.Len(t, stored, 19)
	require.Equal(t, its[18].TransactionID, stored[18].TransactionID)

	// Duplicates compared with their originals in the compressed segment.
	dup := commit(t, s, pid, []*queen.Item{
		its[3],
		payloadItem("z", "p", its[7].TransactionID, `{"other":true}`),
	})
	require.Equal(t, []queen.Verdict{queen.Duplicate, queen.Duplicate}, verdicts(dup))
	require.Equal(t, []bool{false, true}, mismatches(dup))

	// Failing message 0 past retryLimit 0 dead-letters it from the
	// compressed segment.
	it := ackTxn(pid, g, its[0].TransactionID, queen.AckFailed, res.LeaseID)
	it.Error = "boom"
	require.Equal(t, []queen.AckOutcome{queen.DeadLettered}, ack(t, s, it))
	dl, total, err := s.DeadLetters(ctx, queen.DLQFilter{Queue: "z", ConsumerGroup: g, Limit: 10})
	require.NoError(t, err)
	require.Equal(t, int64(1), total)
	require.Equal(t, its[0].TransactionID, dl[0].TransactionID)
	require.Equal(t, string(its[0].Payload), string(dl[0].Data))
	byID, err := s.DeadLettersByID(ctx, "z", g, []int64{dl[0].ID})
	require.NoError(t, err)
	require.Equal(t, dl, byID)
	audited, err := a.DeadLetters(ctx, []string{"z"})
	require.NoError(t, err)
	require.Len(t, audited, 1)
	require.Equal(t, its[0].TransactionID, audited[0].TransactionID)
}

// Segments written raw (every row from before compression, and small ones
// since) still read: a segment of 19 compressible frames inserted raw pops
// and peeks like a compressed one.
func TestRawSegmentsStillRead(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	pid, err := s.EnsurePartition(ctx, "r", "p")
	require.NoError(t, err)
	want, ids, packed := loadSegment(19)
	_, err = s.pool.Exec(ctx, `INSERT INTO queen.segments (partition_num, first_offset, last_offset, created_at, legacy_ids, frames)
		SELECT num, 0, 18, clock_timestamp(), $2, $3 FROM queen.partitions WHERE id = $1`, pid, ids, packed)
	require.NoError(t, err)
	_, err = s.pool.Exec(ctx, `UPDATE queen.partition_ends SET last_offset = 18 WHERE partition_id = $1`, pid)
	require.NoError(t, err)
	require.False(t, compressedSegment(storedFrames(t, s, pid, 0)))

	pk, err := s.Peek(ctx, queen.PeekQuery{Queue: "r", Partition: "p", After: -1, Limit: 50})
	require.NoError(t, err)
	require.Len(t, pk.Messages, 19)
	res, _ := pop(t, s, pid, g, 50)
	require.Len(t, res.Messages, 19)
	for i, m := range res.Messages {
		require.Equal(t, want[i].TransactionID, m.TransactionID)
		require.Equal(t, want[i].TraceID, m.TraceID)
		require.Equal(t, string(want[i].Payload), string(m.Data))
		require.Equal(t, string(want[i].Payload), string(pk.Messages[i].Data))
	}
}

// Migration 0012: frames are stored EXTERNAL (no compression by PostgreSQL)
// on segments_kept, on the ranges of segments_timed that existed when it
// ran, and on the ranges made after it.
func TestFramesStoredExternal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	createRange := func(lo time.Time) {
		var created bool
		require.NoError(t, conn.QueryRow(ctx, sqlSegmentRangeCreate, lo, lo.Add(time.Minute)).Scan(&created))
		require.True(t, created)
	}
	storage := func() map[string]string {
		rows, err := conn.Query(ctx, `SELECT c.relname, a.attstorage::text
			FROM pg_partition_tree('queen.segments') t JOIN pg_class c ON c.oid = t.relid
			JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'frames' WHERE t.isleaf`)
		require.NoError(t, err)
		out := map[string]string{}
		for rows.Next() {
			var n, st string
			require.NoError(t, rows.Scan(&n, &st))
			out[n] = st
		}
		require.NoError(t, rows.Err())
		return out
	}
	// Back to the 0010 storage, with one range made before the migration
	// (and the ids' column under its name of then: 0012 sets its storage,
	// and so does the segment_storage it defines, which the ranges made
	// after it use in this database).
	lo := time.Now().UTC().Truncate(time.Minute)
	createRange(lo)
	for _, q := range []string{
		`ALTER TABLE queen.segments RENAME COLUMN legacy_ids TO message_ids`,
		`ALTER TABLE queen.segments ALTER COLUMN frames SET STORAGE EXTENDED`,
		`DELETE FROM queen.schema_migrations WHERE version = 12`,
	} {
		_, err := conn.Exec(ctx, q)
		require.NoError(t, err, q)
	}
	before := storage()
	require.Len(t, before, 2)
	for n, st := range before {
		require.Equal(t, "x", st, n)
	}
	applied, err := Migrate(ctx, url)
	require.NoError(t, err)
	require.Equal(t, []int{12}, applied)
	createRange(lo.Add(time.Minute))
	after := storage()
	require.Len(t, after, 3)
	for n, st := range after {
		require.Equal(t, "e", st, n)
	}
}

// BenchmarkSegmentCodec packs (compresses) and unpacks (decompresses and
// walks) one segment of load-harness frames per op, both ways together and
// each alone; bytes/op is the packed frames, so MB/s is the raw rate.
func BenchmarkSegmentCodec(b *testing.B) {
	for _, n := range []int{2, 19, 200} {
		_, ids, packed := loadSegment(n)
		stored := packSegment(packed)
		walk := func(b *testing.B, stored []byte) {
			if err := walkFrames(StoredIDs(ids), stored, func(*frameView) error { return nil }); err != nil {
				b.Fatal(err)
			}
		}
		b.Run(fmt.Sprintf("both/frames=%d", n), func(b *testing.B) {
			b.SetBytes(int64(len(packed)))
			b.ReportAllocs()
			for b.Loop() {
				walk(b, packSegment(packed))
			}
			b.ReportMetric(float64(len(stored))/float64(len(packed)), "ratio")
		})
		b.Run(fmt.Sprintf("pack/frames=%d", n), func(b *testing.B) {
			b.SetBytes(int64(len(packed)))
			b.ReportAllocs()
			for b.Loop() {
				packSegment(packed)
			}
		})
		b.Run(fmt.Sprintf("unpack/frames=%d", n), func(b *testing.B) {
			b.SetBytes(int64(len(packed)))
			b.ReportAllocs()
			for b.Loop() {
				walk(b, stored)
			}
		})
	}
}
