package persistence

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stretchr/testify/require"

	queen "github.com/queen-mq/queen-go"
)

// countingQuerier counts the round trips a consume path makes: every batch,
// query and exec sent.
type countingQuerier struct {
	q     querier
	trips int
	sqls  []string // every statement sent, in order
}

func (c *countingQuerier) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	c.trips++
	for _, qq := range b.QueuedQueries {
		c.sqls = append(c.sqls, qq.SQL)
	}
	return c.q.SendBatch(ctx, b)
}

// count returns how many statements sent were sql.
func (c *countingQuerier) count(sql string) int {
	n := 0
	for _, s := range c.sqls {
		if s == sql {
			n++
		}
	}
	return n
}

func (c *countingQuerier) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	c.trips++
	c.sqls = append(c.sqls, sql)
	return c.q.QueryRow(ctx, sql, args...)
}

func (c *countingQuerier) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	c.trips++
	c.sqls = append(c.sqls, sql)
	return c.q.Exec(ctx, sql, args...)
}

// spanPartitions makes queue partitions p0..p(n-1) holding per messages
// each (transactionIds "p<i>-<j>") and returns their ids.
func spanPartitions(t *testing.T, s *Store, queueName string, n, per int) []uuid.UUID {
	t.Helper()
	pids := make([]uuid.UUID, n)
	for i := range n {
		name := fmt.Sprintf("p%d", i)
		pid, err := s.EnsurePartition(context.Background(), queueName, name)
		require.NoError(t, err)
		var ids []string
		for j := range per {
			ids = append(ids, fmt.Sprintf("%s-%d", name, j))
		}
		commit(t, s, pid, items(queueName, name, ids...))
		pids[i] = pid
	}
	return pids
}

// countedPop runs one multi-partition pop on its own connection and
// returns it with the round trips and statements it made.
func countedPop(t *testing.T, s *Store, spec queen.PopSpec, pids []uuid.UUID, most int) (queen.PopResult, []queen.PopState, *countingQuerier) {
	t.Helper()
	ctx := context.Background()
	conn, err := s.pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	cq := &countingQuerier{q: conn}
	states := make([]queen.PopState, len(pids))
	var settled queen.LeaseStats
	res, err := popManyTx(ctx, cq, spec, pids, most, states, &settled, nil)
	require.NoError(t, err)
	return res, states, cq
}

// TestPopPartitionsRoundTrips: a multi-partition pop locks every
// partition it tries in one round trip, reads their spans in a second and
// claims and commits in a third, whatever the number of partitions tried
// (1 to 50), and a pop that finds them all leased reads nothing: two. The
// consumer rows are locked by one statement (consumer_lock's SKIP LOCKED
// form), their spans read by one (consume_segments_many, keyed by what the
// lock read) and the claimed rows written by one (consume_update_many), not
// one each per partition.
func TestPopPartitionsRoundTrips(t *testing.T) {
	s := setup(t)
	for _, n := range []int{1, 5, 50} {
		q := fmt.Sprintf("rt%d", n)
		pids := spanPartitions(t, s, q, n, 3)
		res, states, cq := countedPop(t, s, queen.PopSpec{Group: "g", Batch: 1000, SkipLocked: true}, pids, 0)
		require.Equal(t, 3, cq.trips, "%d partitions: lock, read, claim and commit", n)
		require.Equal(t, 1, cq.count(sqlConsumerLockSkip), "%d partitions: one lock statement", n)
		require.Equal(t, 1, cq.count(sqlConsumeSegsMany), "%d partitions: one segments statement", n)
		require.Equal(t, 1, cq.count(sqlConsumePlanBegin))
		require.Equal(t, 1, cq.count(sqlConsumeUpdateMany), "%d partitions: one write statement", n)
		require.Len(t, res.Messages, 3*n)
		require.NotNil(t, res.LeaseID)
		for i, st := range states {
			require.Equal(t, queen.PopDelivered, st, "partition %d", i)
		}
		_, states, cq = countedPop(t, s, queen.PopSpec{Group: "g", Batch: 1000, SkipLocked: true}, pids, 0)
		require.Equal(t, 2, cq.trips, "%d leased partitions: lock and commit", n)
		require.Equal(t, 1, cq.count(sqlConsumerLockSkip), "%d leased partitions: one lock statement", n)
		require.Equal(t, 0, cq.count(sqlConsumeSegsMany), "%d leased partitions: nothing read", n)
		for _, st := range states {
			require.Equal(t, queen.PopBusy, st)
		}
	}
}

// TestPopPartitionsSpansExact: the spans a multi-partition pop claims are
// each partition's next messages in offset order, stop at the batch (the
// rest of a partition is the next pop's) and at most partitions, carry one
// lease and name their partitions; an ack of them moves each partition's
// cursor, and the next pop starts exactly where each span ended.
func TestPopPartitionsSpansExact(t *testing.T) {
	s := setup(t)
	ctx := context.Background()
	pids := spanPartitions(t, s, "q", 4, 3)
	res, states, err := s.PopPartitions(ctx, queen.PopSpec{Group: "g", Batch: 5, SkipLocked: true}, pids, 0)
	require.NoError(t, err)
	require.Equal(t, []string{"p0-0", "p0-1", "p0-2", "p1-0", "p1-1"}, txns(res))
	require.Equal(t, []queen.PopState{queen.PopDelivered, queen.PopCut, queen.PopUnreached, queen.PopUnreached}, states)
	require.Equal(t, "p0", res.Partition)
	var acks []queen.AckItem
	lease := uuid.MustParse(*res.LeaseID)
	for _, m := range res.Messages {
		require.Equal(t, *res.LeaseID, *m.LeaseID)
		require.Equal(t, m.TransactionID[:2], m.Partition)
		require.Equal(t, "q", m.Queue)
		acks = append(acks, queen.AckItem{PartitionID: uuid.MustParse(m.PartitionID), Offset: m.Offset,
			Status: queen.AckCompleted, ConsumerGroup: "g", LeaseID: &lease, TransactionID: m.TransactionID})
	}
	require.Equal(t, []queen.AckOutcome{queen.Acked, queen.Acked, queen.Acked, queen.Acked, queen.Acked}, ack(t, s, acks...))

	// At most 2 partitions: p0 is drained, p1's rest and p2.
	res, states, err = s.PopPartitions(ctx, queen.PopSpec{Group: "g", Batch: 100, SkipLocked: true}, pids, 2)
	require.NoError(t, err)
	require.Equal(t, []string{"p1-2", "p2-0", "p2-1", "p2-2"}, txns(res))
	require.Equal(t, []queen.PopState{queen.PopEmpty, queen.PopDelivered, queen.PopDelivered, queen.PopUnreached}, states)
	// The other group starts at the beginning, autoAck moves its cursors.
	res, _, err = s.PopPartitions(ctx, queen.PopSpec{Group: "h", Batch: 4, AutoAck: true}, pids[2:], 0)
	require.NoError(t, err)
	require.Equal(t, []string{"p2-0", "p2-1", "p2-2", "p3-0"}, txns(res))
	require.Nil(t, res.LeaseID)
	res, _, err = s.PopPartitions(ctx, queen.PopSpec{Group: "h", Batch: 4, AutoAck: true}, pids[2:], 0)
	require.NoError(t, err)
	require.Equal(t, []string{"p3-1", "p3-2"}, txns(res))
}

// TestPopPartitionsConcurrentConsumers: four consumers of a group pop many
// partitions at once (each its own order, skipping rows another holds) and
// ack what they get: every message is delivered exactly once.
func TestPopPartitionsConcurrentConsumers(t *testing.T) {
	s := setup(t)
	const parts, per = 40, 5
	pids := spanPartitions(t, s, "q", parts, per)
	var mu sync.Mutex
	seen := map[string]int{}
	total := 0
	deadline := time.Now().Add(time.Minute)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for c := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			rng := rand.New(rand.NewPCG(uint64(c), 7))
			order := append([]uuid.UUID(nil), pids...)
			for time.Now().Before(deadline) {
				mu.Lock()
				done := total == parts*per
				mu.Unlock()
				if done {
					return
				}
				rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
				res, _, err := s.PopPartitions(ctx, queen.PopSpec{Group: "g", Batch: 7, SkipLocked: true}, order[:8], 3)
				if err != nil {
					errs <- err
					return
				}
				if len(res.Messages) == 0 {
					continue
				}
				lease := uuid.MustParse(*res.LeaseID)
				var acks []queen.AckItem
				mu.Lock()
				for _, m := range res.Messages {
					seen[m.TransactionID]++
					total++
					acks = append(acks, queen.AckItem{PartitionID: uuid.MustParse(m.PartitionID), Offset: m.Offset,
						Status: queen.AckCompleted, ConsumerGroup: "g", LeaseID: &lease, TransactionID: m.TransactionID})
				}
				mu.Unlock()
				out, err := s.Ack(ctx, acks)
				if err != nil {
					errs <- err
					return
				}
				for _, r := range out {
					if r.Result != queen.Acked {
						errs <- fmt.Errorf("ack %s: %s %s", r.TransactionID, r.Result, r.Error)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Len(t, seen, parts*per, "every message delivered")
	for txn, n := range seen {
		require.Equal(t, 1, n, "%s delivered %d times", txn, n)
	}
}

// TestPopPartitionsBisects: a multi-partition pop respects each (partition,
// group)'s bisection (SPEC.md §4): after p0's span of four expires unacked,
// the next pop holds two of p0's messages (none charged) and the whole of
// p1; p0's single message that then expires is charged once.
func TestPopPartitionsBisects(t *testing.T) {
	s := setup(t)
	ctx := context.Background()
	pids := spanPartitions(t, s, "q", 2, 4)
	spec := queen.PopSpec{Group: "g", Batch: 100, SkipLocked: true}
	res, _, err := s.PopPartitions(ctx, spec, pids[:1], 0)
	require.NoError(t, err)
	require.Len(t, res.Messages, 4)
	runOutLease(t, s, pids[0], "g")
	res, states, err := s.PopPartitions(ctx, spec, pids, 0)
	require.NoError(t, err)
	require.Equal(t, []queen.PopState{queen.PopCut, queen.PopDelivered}, states)
	require.Equal(t, []string{"p0-0", "p0-1", "p1-0", "p1-1", "p1-2", "p1-3"}, txns(res))
	for _, m := range res.Messages {
		require.Zero(t, m.RetryCount)
	}
	require.Equal(t, queen.LeaseStats{Expiries: 1, Bisections: 1}, s.LeaseStats())
	runOutLease(t, s, pids[0], "g")
	res, _, err = s.PopPartitions(ctx, spec, pids[:1], 0)
	require.NoError(t, err)
	require.Equal(t, []string{"p0-0"}, txns(res))
	runOutLease(t, s, pids[0], "g")
	res, _, err = s.PopPartitions(ctx, spec, pids[:1], 0)
	require.NoError(t, err)
	require.Equal(t, []string{"p0-0"}, txns(res))
	require.Equal(t, 1, res.Messages[0].RetryCount, "a single-message span that expires is charged")
}

// TestAckOneRoundTripPerSide: an ack of a multi-partition pop's messages
// locks every consumer row it touches in one round trip and writes them and
// commits in a second, whatever the number of partitions (1 to 50), each
// side one statement for all rows, one row as many (consumer_lock and
// consume_hash_at, consume_update_many);
// every ack is applied and the next pop starts after the acked spans.
func TestAckOneRoundTripPerSide(t *testing.T) {
	s := setup(t)
	ctx := context.Background()
	for _, n := range []int{1, 5, 50} {
		q := fmt.Sprintf("ackrt%d", n)
		pids := spanPartitions(t, s, q, n, 3)
		res, _, err := s.PopPartitions(ctx, queen.PopSpec{Group: "g", Batch: 1000, SkipLocked: true}, pids, 0)
		require.NoError(t, err)
		require.Len(t, res.Messages, 3*n)
		lease := uuid.MustParse(*res.LeaseID)
		var acks []queen.AckItem
		for _, m := range res.Messages {
			acks = append(acks, queen.AckItem{PartitionID: uuid.MustParse(m.PartitionID), Offset: m.Offset,
				Status: queen.AckCompleted, ConsumerGroup: "g", LeaseID: &lease, TransactionID: m.TransactionID})
		}
		conn, err := s.pool.Acquire(ctx)
		require.NoError(t, err)
		cq := &countingQuerier{q: conn}
		out, rows := groupByConsumerRow(acks)
		require.NoError(t, ackTx(ctx, cq, acks, out, rows, nil, nil))
		conn.Release()
		require.Equal(t, 2, cq.trips, "%d partitions: lock and commit", n)
		for _, c := range []struct {
			sql  string
			want int
		}{{sqlConsumerLock, 1}, {sqlConsumeUpdateMany, 1}, {sqlConsumePlanBegin, 1}, {sqlConsumeHashAt, 1}} {
			require.Equal(t, c.want, cq.count(c.sql), "%d partitions: %.60s", n, c.sql)
		}
		for i, r := range out {
			require.Equal(t, queen.Acked, r.Result, "ack %d", i)
		}
		res, _, err = s.PopPartitions(ctx, queen.PopSpec{Group: "g", Batch: 1000, SkipLocked: true}, pids, 0)
		require.NoError(t, err)
		require.Empty(t, res.Messages, "%d partitions: every span acked", n)
	}
}

// byID returns pids sorted ascending (PostgreSQL's uuid order).
func byID(pids []uuid.UUID) []uuid.UUID {
	out := append([]uuid.UUID(nil), pids...)
	sort.Slice(out, func(a, b int) bool { return bytes.Compare(out[a][:], out[b][:]) < 0 })
	return out
}

// TestLockManyAscendingOrder: a pop's lock (lockMany) locks the consumer
// rows in ascending partition id whatever the order it is given (the order
// every pop and ack locks in, so none can deadlock), and answers each row
// at its position in the request. With the middle row held by another
// session, a lock of [hi, lo, missing, mid] waits holding lo's row and not
// hi's; once released, it returns all three at their positions. A
// partition without a consumer row returns no row. consumer_lock itself
// locks in the order it is given (the ack's lock order), the same way.
func TestLockManyAscendingOrder(t *testing.T) {
	t.Parallel()
	s, _, url := setupLocks(t)
	ctx := context.Background()
	pids := spanPartitions(t, s, "order", 3, 1)
	_, _, err := s.PopPartitions(ctx, queen.PopSpec{Group: "g", Batch: 10, AutoAck: true}, pids, 0) // creates the rows
	require.NoError(t, err)
	sorted := byID(pids)
	lo, mid, hi := sorted[0], sorted[1], sorted[2]
	release := holdLock(t, url, `SELECT 1 FROM queen.consumers WHERE partition_id = $1 AND consumer_group = 'g' FOR UPDATE`, mid)

	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var backend int
	require.NoError(t, conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&backend))
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	missing := uuid.Must(uuid.NewV7())
	type got struct {
		pos []int64
		err error
	}
	done := make(chan got, 1)
	go func() {
		asked := []uuid.UUID{hi, lo, missing, mid}
		sts, found := make([]consumerState, len(asked)), make([]bool, len(asked))
		b := &pgx.Batch{}
		lockMany(b, asked, "g", false, sts, found)
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			done <- got{err: err}
			return
		}
		var pos []int64
		for i := range asked {
			if found[i] {
				pos = append(pos, int64(i+1))
			}
		}
		done <- got{pos: pos}
	}()

	// Wait (polling, with a deadline) until the lock statement waits for mid.
	waitBlocked := func() {
		deadline := time.Now().Add(30 * time.Second)
		for {
			var waiting bool
			require.NoError(t, s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE pid = $1 AND NOT granted)`, backend).Scan(&waiting))
			if waiting {
				return
			}
			require.True(t, time.Now().Before(deadline), "the lock statement never waited")
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitBlocked()
	free := func() []uuid.UUID {
		rows, err := s.pool.Query(ctx, `SELECT partition_id FROM queen.consumers WHERE consumer_group = 'g' ORDER BY partition_id FOR UPDATE SKIP LOCKED`)
		require.NoError(t, err)
		ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
		require.NoError(t, err)
		return ids
	}
	require.Equal(t, []uuid.UUID{hi}, free(), "lo is locked (before mid), hi is not yet (after mid)")

	release()
	r := <-done
	require.NoError(t, r.err)
	require.Equal(t, []int64{1, 2, 4}, r.pos, "hi, lo and mid at their positions in the request; missing has no row")
	require.Empty(t, free(), "all three locked")
	require.NoError(t, tx.Rollback(ctx))

	// consumer_lock locks in the order given (the ack's: ascending
	// partition id, then group), each row with its lock wait.
	release = holdLock(t, url, `SELECT 1 FROM queen.consumers WHERE partition_id = $1 AND consumer_group = 'g' FOR UPDATE`, mid)
	tx, err = conn.Begin(ctx)
	require.NoError(t, err)
	go func() {
		rows, err := tx.Query(ctx, sqlConsumerLock, []uuid.UUID{lo, missing, mid, hi}, []string{"g", "g", "g", "g"})
		if err != nil {
			done <- got{err: err}
			return
		}
		var pos []int64
		for rows.Next() {
			vals, err := rows.Values()
			if err != nil {
				done <- got{err: err}
				return
			}
			if w := vals[len(vals)-1].(float64); w < 0 {
				done <- got{err: fmt.Errorf("negative lock wait %v", w)}
				return
			}
			pos = append(pos, vals[0].(int64))
		}
		done <- got{pos: pos, err: rows.Err()}
	}()
	waitBlocked()
	require.Equal(t, []uuid.UUID{hi}, free(), "lo is locked (before mid), hi is not yet (after mid)")
	release()
	r = <-done
	require.NoError(t, r.err)
	require.Equal(t, []int64{1, 3, 4}, r.pos)
	require.Empty(t, free(), "all three locked")
}

// TestPopPartitionsSkipsHeldRow: a skip-locked multi-partition pop answers
// busy for the row another session holds and delivers the others; a pop
// that waits (no SkipLocked) fails with lock_timeout and claims nothing.
func TestPopPartitionsSkipsHeldRow(t *testing.T) {
	t.Parallel()
	s, _, url := setupLocks(t)
	ctx := context.Background()
	pids := spanPartitions(t, s, "skip", 3, 2)
	res, _, err := s.PopPartitions(ctx, queen.PopSpec{Group: "g", Batch: 1, AutoAck: true}, pids[:1], 0) // creates p0's row
	require.NoError(t, err)
	require.Equal(t, []string{"p0-0"}, txns(res))
	release := holdLock(t, url, `SELECT 1 FROM queen.consumers WHERE partition_id = $1 AND consumer_group = 'g' FOR UPDATE`, pids[0])
	_, _, err = s.PopPartitions(ctx, queen.PopSpec{Group: "g", Batch: 10}, pids, 0)
	require.ErrorIs(t, err, queen.ErrLockTimeout)
	res, states, err := s.PopPartitions(ctx, queen.PopSpec{Group: "g", Batch: 10, SkipLocked: true}, pids, 0)
	require.NoError(t, err)
	require.Equal(t, []queen.PopState{queen.PopBusy, queen.PopDelivered, queen.PopDelivered}, states)
	require.Equal(t, []string{"p1-0", "p1-1", "p2-0", "p2-1"}, txns(res))
	release()
	res, states, err = s.PopPartitions(ctx, queen.PopSpec{Group: "g", Batch: 10, SkipLocked: true}, pids, 0)
	require.NoError(t, err)
	require.Equal(t, []queen.PopState{queen.PopDelivered, queen.PopBusy, queen.PopBusy}, states)
	require.Equal(t, []string{"p0-1"}, txns(res))
}

// spanArgs is consume_segments_many's arguments for the consumer rows of
// pids and group as a pop passes them (popMany.readSpans): each row read by
// consumer_lock, only the rows without a live lease whose partition ends
// above the cursor, then batch; at maps each element to its index in pids.
func spanArgs(t *testing.T, s *Store, pids []uuid.UUID, group string, batch int) (args []any, at []int) {
	t.Helper()
	groups := make([]string, len(pids))
	for i := range groups {
		groups[i] = group
	}
	rows, err := s.pool.Query(context.Background(), sqlConsumerLock, pids, groups)
	require.NoError(t, err)
	defer rows.Close()
	var nums, cursors, delayed, buffers []int64
	var since []pgtype.Timestamptz
	for rows.Next() {
		var st consumerState
		var i int64
		require.NoError(t, st.scan(rows, &i))
		if st.live || st.cursor >= st.lastOffset {
			continue
		}
		at = append(at, int(i-1))
		nums, cursors, since = append(nums, st.num), append(cursors, st.cursor), append(since, st.since)
		delayed, buffers = append(delayed, st.delayed), append(buffers, st.windowBuffer)
	}
	require.NoError(t, rows.Err())
	return []any{nums, cursors, since, delayed, buffers, batch}, at
}

// segFirsts runs consume_segments_many over pids as a pop does (spanArgs)
// and returns, per 1-based position in pids, the first offsets of the rows.
func segFirsts(t *testing.T, s *Store, pids []uuid.UUID, group string, batch int) map[int64][]int64 {
	t.Helper()
	args, at := spanArgs(t, s, pids, group, batch)
	rows, err := s.pool.Query(context.Background(), sqlConsumeSegsMany, args...)
	require.NoError(t, err)
	defer rows.Close()
	out := map[int64][]int64{}
	for rows.Next() {
		vals, err := rows.Values()
		require.NoError(t, err)
		i := int64(at[vals[0].(int64)-1] + 1)
		out[i] = append(out[i], vals[1].(int64))
	}
	require.NoError(t, rows.Err())
	return out
}

// TestSegmentsManyMatchesAlone: consume_segments_many returns, for each
// partition of its array, exactly the segments it returns for that
// partition alone (a one-partition pop), at every batch size: cursors inside and between segments, a
// drained row, a live lease, no consumer row, no segments, delayedProcessing
// (an old and a new segment) and windowBuffer (an old and a new partition),
// across queues.
func TestSegmentsManyMatchesAlone(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	part := func(queueName, name string) uuid.UUID {
		pid, err := s.EnsurePartition(ctx, queueName, name)
		require.NoError(t, err)
		return pid
	}
	autoAck := func(pid uuid.UUID, n int) {
		res, st, err := popOne(ctx, s, queen.PopSpec{PartitionID: pid, Group: "g", Batch: n, AutoAck: true})
		require.NoError(t, err)
		require.Contains(t, []queen.PopState{queen.PopDelivered, queen.PopCut}, st)
		require.Len(t, res.Messages, n)
	}
	backdate := func(pid uuid.UUID, from int64) {
		_, err := s.pool.Exec(ctx, `UPDATE queen.segments SET created_at = created_at - interval '2 minutes' WHERE partition_num = (SELECT num FROM queen.partitions WHERE id = $1) AND first_offset >= $2`, pid, from)
		require.NoError(t, err)
	}
	var pids []uuid.UUID
	// singles: five one-message segments, cursor after two.
	p := part("eq", "singles")
	commitEach(t, s, p, "eq", "singles", "a", "b", "c", "d", "e")
	autoAck(p, 2)
	pids = append(pids, p)
	// mixed: a three-message segment then four singles, cursor inside the first.
	p = part("eq", "mixed")
	commit(t, s, p, items("eq", "mixed", "m0", "m1", "m2"))
	commitEach(t, s, p, "eq", "mixed", "m3", "m4", "m5", "m6")
	autoAck(p, 1)
	pids = append(pids, p)
	// drained, leased, no row, empty.
	p = part("eq", "drained")
	commitEach(t, s, p, "eq", "drained", "x", "y")
	autoAck(p, 2)
	pids = append(pids, p)
	p = part("eq", "leased")
	commitEach(t, s, p, "eq", "leased", "l0", "l1")
	_, _, err := popOne(ctx, s, queen.PopSpec{PartitionID: p, Group: "g", Batch: 1})
	require.NoError(t, err)
	pids = append(pids, p)
	p = part("eq", "norow")
	commitEach(t, s, p, "eq", "norow", "n0")
	pids = append(pids, p)
	p = part("eq", "empty")
	_, _, err = popOne(ctx, s, queen.PopSpec{PartitionID: p, Group: "g", Batch: 1})
	require.NoError(t, err)
	pids = append(pids, p)
	// delayedProcessing 60 s: an old segment and a new one.
	configure(t, s, "delayed", `{"delayedProcessing":60}`)
	p = part("delayed", "d")
	commitEach(t, s, p, "delayed", "d", "d0", "d1")
	backdate(p, 0)
	commitEach(t, s, p, "delayed", "d", "d2")
	_, _, err = popOne(ctx, s, queen.PopSpec{PartitionID: p, Group: "g", Batch: 1, AutoAck: true})
	require.NoError(t, err)
	pids = append(pids, p)
	// windowBuffer 60 s: a partition whose newest segment is old, one whose is new.
	configure(t, s, "buffered", `{"windowBuffer":60}`)
	for _, name := range []string{"old", "new"} {
		p = part("buffered", name)
		commitEach(t, s, p, "buffered", name, name+"0", name+"1")
		if name == "old" {
			backdate(p, 0)
		}
		_, _, err = popOne(ctx, s, queen.PopSpec{PartitionID: p, Group: "g", Batch: 1, AutoAck: true})
		require.NoError(t, err)
		pids = append(pids, p)
	}

	rng := rand.New(rand.NewPCG(1, 2))
	nonEmpty := 0
	for _, batch := range []int{1, 2, 3, 100} {
		order := append([]uuid.UUID(nil), pids...)
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		many := segFirsts(t, s, order, "g", batch)
		for i, pid := range order {
			single := segFirsts(t, s, []uuid.UUID{pid}, "g", batch)[1]
			require.Equal(t, single, many[int64(i+1)], "batch %d, partition %d", batch, i)
			if len(single) > 0 {
				nonEmpty++
			}
		}
		require.Len(t, many, len(segFirsts(t, s, pids, "g", batch)))
	}
	require.Equal(t, 4*4, nonEmpty, "singles, mixed, delayed's old segment and the old buffered partition have segments at every batch")
}
