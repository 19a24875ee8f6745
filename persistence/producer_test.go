package persistence

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	queen "github.com/queen-mq/queen-go"
)

// The producer's identity on every stored message (SPEC.md §14, migration
// 0018): kept once per segment, a commit split into one segment per run of
// items with the same producer, empty with JWT off.

// withProducers sets the items' ProducerSub, in order.
func withProducers(its []*queen.Item, subs ...string) []*queen.Item {
	for i, sub := range subs {
		its[i].ProducerSub = sub
	}
	return its
}

type segProducer struct {
	First, Last int64
	Producer    *string
}

// segmentProducers lists partition pid's segments with their producer, in
// offset order.
func segmentProducers(t *testing.T, s *Store, pid uuid.UUID) []segProducer {
	t.Helper()
	rows, err := s.pool.Query(context.Background(),
		`SELECT first_offset, last_offset, producer_sub FROM queen.segments WHERE partition_num = (SELECT num FROM queen.partitions WHERE id = $1) ORDER BY first_offset`, pid)
	require.NoError(t, err)
	defer rows.Close()
	var out []segProducer
	for rows.Next() {
		var sp segProducer
		require.NoError(t, rows.Scan(&sp.First, &sp.Last, &sp.Producer))
		out = append(out, sp)
	}
	require.NoError(t, rows.Err())
	return out
}

func strp(s string) *string { return &s }

func peekProducers(t *testing.T, s *Store, queueName, partition string) []*string {
	t.Helper()
	res, err := s.Peek(context.Background(), queen.PeekQuery{Queue: queueName, Partition: partition, After: -1, Limit: 100})
	require.NoError(t, err)
	out := make([]*string, len(res.Messages))
	for i, m := range res.Messages {
		out[i] = m.ProducerSub
	}
	return out
}

func TestProducerSubOncePerSegment(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	pid, err := s.EnsurePartition(ctx, "ps", "p")
	require.NoError(t, err)

	// JWT off: no producer, one segment.
	commit(t, s, pid, items("ps", "p", "a", "b"))
	require.Equal(t, []segProducer{{0, 1, strp("")}}, segmentProducers(t, s, pid), "none is stored empty (no null bitmap)")

	// One request's items share their producer: one segment.
	commit(t, s, pid, withProducers(items("ps", "p", "c", "d"), "alice", "alice"))
	// A fused commit of several producers' requests (and a repeat, written
	// nowhere): one segment per run, consecutive offsets, one allocator.
	out := commit(t, s, pid, withProducers(items("ps", "p", "e", "f", "c", "g", "h", "i"), "alice", "bob", "bob", "bob", "", "alice"))
	require.Equal(t, []queen.Verdict{queen.Queued, queen.Queued, queen.Duplicate, queen.Queued, queen.Queued, queen.Queued}, verdicts(out))
	require.Equal(t, int64(4), out.FirstOffset)
	require.Equal(t, int64(8), out.LastOffset)
	require.Equal(t, []segProducer{
		{0, 1, strp("")}, {2, 3, strp("alice")},
		{4, 4, strp("alice")}, {5, 6, strp("bob")}, {7, 7, strp("")}, {8, 8, strp("alice")},
	}, segmentProducers(t, s, pid))
	next := commit(t, s, pid, items("ps", "p", "j"))
	require.Equal(t, int64(9), next.FirstOffset, "the allocator is at the last run's end")
	dup := commit(t, s, pid, withProducers(items("ps", "p", "g"), "carol"))
	require.Equal(t, queen.Duplicate, dup.Results[0].Verdict, "the hashes of a split commit are all in the window")

	require.Equal(t, []*string{nil, nil, strp("alice"), strp("alice"), strp("alice"), strp("bob"), strp("bob"), nil, strp("alice"), nil},
		peekProducers(t, s, "ps", "p"))
	res, st, err := popOne(ctx, s, queen.PopSpec{PartitionID: pid, Group: "g", Batch: 100})
	require.NoError(t, err)
	require.Equal(t, queen.PopDelivered, st)
	require.Len(t, res.Messages, 10)
	require.Nil(t, res.Messages[0].ProducerSub)
	require.Equal(t, "bob", *res.Messages[6].ProducerSub)

	// A bundle of two partitions, each split.
	p2, err := s.EnsurePartition(ctx, "ps", "p2")
	require.NoError(t, err)
	b1 := &queen.PushBatch{PartitionID: pid, Items: withProducers(items("ps", "p", "k", "l"), "x", "y"), Watermark: -1}
	b2 := &queen.PushBatch{PartitionID: p2, Items: withProducers(items("ps", "p2", "k", "l", "m"), "y", "y", "x"), Watermark: -1}
	outs, err := s.CommitBundle(ctx, []*queen.PushBatch{b1, b2})
	require.NoError(t, err)
	require.Equal(t, int64(10), outs[0].FirstOffset)
	require.Equal(t, []segProducer{{0, 1, strp("y")}, {2, 2, strp("x")}}, segmentProducers(t, s, p2))
	var last1, last2 int64
	require.NoError(t, s.pool.QueryRow(ctx, `SELECT (SELECT last_offset FROM queen.partition_ends WHERE partition_id = $1), (SELECT last_offset FROM queen.partition_ends WHERE partition_id = $2)`, pid, p2).Scan(&last1, &last2))
	require.Equal(t, [2]int64{11, 2}, [2]int64{last1, last2})

	// A transaction's pushes carry their request's producer.
	_, err = s.Transaction(ctx, &queen.TxnRequest{Ops: []queen.TxnOp{txnPushOp(withProducers(items("ps", "t", "t1", "t2"), "dave", "dave")...)}})
	require.NoError(t, err)
	require.Equal(t, []*string{strp("dave"), strp("dave")}, peekProducers(t, s, "ps", "t"))
}

// Migration 0018 on a database of the previous release (schema 17): a
// range of segments_timed detached and awaiting its drop gets the column, so
// it attaches back; the rows stored before have no producer; a push
// statement naming the columns as the previous release's did still writes
// (an empty producer), so the migration needs no wait for older brokers.
// No row of the segments gets a NULL, so none grows a null bitmap.
func TestProducerSubMigration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, conn := databaseAt(t, 17)
	lo := time.Now().UTC().Truncate(time.Minute).Add(-time.Hour)
	hi := lo.Add(time.Minute)
	_, err := conn.Exec(ctx, `SELECT queen.segment_create_range($1, $2)`, lo, hi)
	require.NoError(t, err)
	var name string
	require.NoError(t, conn.QueryRow(ctx, `SELECT name FROM queen.segment_ranges WHERE lo = $1`, lo).Scan(&name))
	rng := pgx.Identifier{"queen", name}.Sanitize()
	_, err = conn.Exec(ctx, `ALTER TABLE queen.segments_timed DETACH PARTITION `+rng)
	require.NoError(t, err)
	pid := uuid.New()
	oldInsert := `INSERT INTO queen.segments (partition_id, first_offset, last_offset, created_at, message_ids, frames, hashes, timed)
	              VALUES ($1, $2, $2, clock_timestamp(), $3, $4, $5, false)`
	frame := func(txn string) (ids, frames, hashes []byte) {
		id, h := uuid.New(), queen.HashTxn(txn)
		return id[:], AppendFrame(nil, txn, nil, []byte(`{}`)), h[:]
	}
	for _, q := range []string{
		`INSERT INTO queen.queues (name) VALUES ('mq')`,
		`INSERT INTO queen.partitions (id, queue_id, name, last_offset) SELECT '` + pid.String() + `', id, 'p', 1 FROM queen.queues`,
	} {
		_, err := conn.Exec(ctx, q)
		require.NoError(t, err, q)
	}
	ids, frames, hashes := frame("old")
	_, err = conn.Exec(ctx, oldInsert, pid, 0, ids, frames, hashes)
	require.NoError(t, err)

	// Up to the schema before migration 0025, which rewrites the segments
	// (the detached range among them) and names their partition by number.
	applied, err := migrateTo(ctx, url, 24)
	require.NoError(t, err)
	require.Contains(t, applied, 18)
	_, err = conn.Exec(ctx, `ALTER TABLE queen.segments_timed ATTACH PARTITION `+rng+` FOR VALUES FROM ('`+lo.Format(time.RFC3339)+`') TO ('`+hi.Format(time.RFC3339)+`')`)
	require.NoError(t, err, "the detached range got the column")
	// The previous release's insert (no producer_sub) still writes; its ids'
	// column has had its layout-3 name since migration 0022.
	ids, frames, hashes = frame("older broker")
	_, err = conn.Exec(ctx, strings.Replace(oldInsert, "message_ids", "legacy_ids", 1), pid, 1, ids, frames, hashes)
	require.NoError(t, err, "the previous release's insert still writes")
	applied, err = Migrate(ctx, url)
	require.NoError(t, err)
	require.Contains(t, applied, 25)

	s, err := Open(ctx, Config{URL: url})
	require.NoError(t, err)
	defer s.Close()
	out := commit(t, s, pid, withProducers(items("mq", "p", "new"), "erin"))
	require.Equal(t, int64(2), out.FirstOffset)
	require.Equal(t, []*string{nil, nil, strp("erin")}, peekProducers(t, s, "mq", "p"))
	var nulls int64
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM queen.segments WHERE producer_sub IS NULL`).Scan(&nulls))
	require.Zero(t, nulls)
}

// Why none is stored empty rather than NULL: a segment row has no NULL
// otherwise, and one NULL gives it a null bitmap, which costs more than the
// empty string's one byte.
func TestProducerSubNoneCostsOneByte(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	pid, err := s.EnsurePartition(ctx, "pz", "p")
	require.NoError(t, err)
	commit(t, s, pid, items("pz", "p", "a"))
	commit(t, s, pid, items("pz", "p", "b"))
	_, err = s.pool.Exec(ctx, `UPDATE queen.segments SET producer_sub = NULL WHERE partition_num = (SELECT num FROM queen.partitions WHERE id = $1) AND first_offset = 1`, pid)
	require.NoError(t, err)
	var empty, null int
	require.NoError(t, s.pool.QueryRow(ctx, `SELECT
	    (SELECT pg_column_size(s.*) FROM queen.segments s WHERE partition_num = (SELECT num FROM queen.partitions WHERE id = $1) AND first_offset = 0),
	    (SELECT pg_column_size(s.*) FROM queen.segments s WHERE partition_num = (SELECT num FROM queen.partitions WHERE id = $1) AND first_offset = 1)`, pid).Scan(&empty, &null))
	t.Logf("a one-message segment row: %d bytes with an empty producer, %d with NULL", empty, null)
	require.Equal(t, 7, null-empty, "NULL: a null bitmap, the data 8 bytes further; empty: one byte")
}
