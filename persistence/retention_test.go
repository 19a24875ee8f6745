package persistence

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	queen "github.com/queen-mq/queen-go"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// Retention tests make rows old by moving their created_at back (tests
// only), never by waiting.

// age moves the created_at of partition pid's segments and sidecar rows
// back by d (Store.AgePartitions).
func age(t testing.TB, s *Store, pid uuid.UUID, d time.Duration) {
	t.Helper()
	require.NoError(t, s.AgePartitions(context.Background(), []uuid.UUID{pid}, d))
}

// rowCounts counts partition pid's segments, the messages in them and the
// offsets the sidecar index holds an entry for (level 0 or 1; migration
// 0017: entries are self-contained and live with their time range).
type rowCounts struct{ Segments, Messages, Hashes int64 }

func counts(t testing.TB, s *Store, pid uuid.UUID) rowCounts {
	t.Helper()
	var c rowCounts
	require.NoError(t, s.pool.QueryRow(context.Background(), `
SELECT (SELECT count(*) FROM queen.segments WHERE partition_num = (SELECT num FROM queen.partitions WHERE id = $1)),
       (SELECT COALESCE(sum(last_offset - first_offset + 1), 0)::bigint FROM queen.segments WHERE partition_num = (SELECT num FROM queen.partitions WHERE id = $1)),
       (SELECT count(DISTINCT z.o) FROM (
            SELECT x."offset" AS o FROM queen.log_txn_hashes x WHERE x.partition_id = $1
            UNION ALL
            SELECT e.first + e.idx FROM queen.hash_blocks k
             CROSS JOIN LATERAL generate_subscripts(k.hashes, 1) AS i
             CROSS JOIN LATERAL queen.hash_entry(k.entries, i) e
             WHERE e.num = (SELECT num FROM queen.partitions WHERE id = $1)) z)`, pid).Scan(&c.Segments, &c.Messages, &c.Hashes))
	return c
}

// segmentOffsets lists the first offsets of partition pid's segments.
func segmentOffsets(t testing.TB, s *Store, pid uuid.UUID) []int64 {
	t.Helper()
	rows, err := s.pool.Query(context.Background(), `SELECT first_offset FROM queen.segments WHERE partition_num = (SELECT num FROM queen.partitions WHERE id = $1) ORDER BY first_offset`, pid)
	require.NoError(t, err)
	var out []int64
	for rows.Next() {
		var o int64
		require.NoError(t, rows.Scan(&o))
		out = append(out, o)
	}
	require.NoError(t, rows.Err())
	return out
}

// commitEach commits each transaction id as its own segment.
func commitEach(t testing.TB, s *Store, pid uuid.UUID, queueName, partition string, txns ...string) {
	t.Helper()
	for _, txn := range txns {
		out := commit(t, s, pid, items(queueName, partition, txn))
		require.Equal(t, queen.Queued, out.Results[0].Verdict, txn)
	}
}

func ackAt(pid uuid.UUID, group string, off int64) queen.AckItem {
	return queen.AckItem{PartitionID: pid, Offset: off, Status: queen.AckCompleted, ConsumerGroup: group}
}

func step(t testing.TB, s *Store, cfg RetentionConfig) RetentionCounts {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := s.RetentionStep(ctx, cfg)
	require.NoError(t, err)
	return c
}

func partition(t testing.TB, s *Store, queueName, name string) uuid.UUID {
	t.Helper()
	pid, err := s.EnsurePartition(context.Background(), queueName, name)
	require.NoError(t, err)
	return pid
}

func TestRetentionSecondsDeletesOldSegments(t *testing.T) {
	t.Parallel()
	s := setup(t)
	configure(t, s, "rx", `{"retentionSeconds":60}`)
	configure(t, s, "keep", `{}`)
	pid := partition(t, s, "rx", "p")
	keep := partition(t, s, "keep", "p")

	commitEach(t, s, pid, "rx", "p", "m0", "m1", "m2")
	// m0 is consumed, m1 and m2 are not: retentionSeconds ignores that.
	require.Equal(t, []queen.AckOutcome{queen.Acked}, ack(t, s, ackAt(pid, g, 0)))
	age(t, s, pid, 120*time.Second)
	commitEach(t, s, pid, "rx", "p", "m3", "m4") // young
	commitEach(t, s, keep, "keep", "p", "k0")
	age(t, s, keep, 100*24*time.Hour) // retentionSeconds 0 keeps it forever

	c := step(t, s, RetentionConfig{})
	require.Equal(t, RetentionStepCount{Statements: 1, Rows: 3, Messages: 3}, c.Expired)
	require.Zero(t, c.Completed.Rows)
	require.Equal(t, RetentionStepCount{Statements: 1, Rows: 1, Messages: 1}, c.Sidecar, "only keep's sidecar entry is older than every window (3600 s)")
	require.Equal(t, []int64{3, 4}, segmentOffsets(t, s, pid), "nothing younger than retentionSeconds goes")
	require.Equal(t, rowCounts{Segments: 1, Messages: 1}, counts(t, s, keep), "keep's segment stays; its sidecar row aged out")
	require.Equal(t, int64(5), counts(t, s, pid).Hashes, "segments go, their sidecar entries stay")

	// Consumers skip the gap: a group that consumed nothing starts at m3.
	res, st := pop(t, s, pid, "late", 10)
	require.Equal(t, queen.PopDelivered, st)
	require.Equal(t, []string{"m3", "m4"}, txns(res))

	// A second pass has nothing to do.
	c = step(t, s, RetentionConfig{})
	require.False(t, c.Deleted())
	require.Equal(t, 1, c.Expired.Statements)
}

func TestCompletedRetentionDeletesOnlyWhatEveryGroupCommitted(t *testing.T) {
	t.Parallel()
	s := setup(t)
	configure(t, s, "cq", `{"completedRetentionSeconds":60}`)
	configure(t, s, "nogroups", `{"completedRetentionSeconds":60}`)
	a := partition(t, s, "cq", "a")
	b := partition(t, s, "cq", "b")
	young := partition(t, s, "cq", "young")
	lone := partition(t, s, "nogroups", "p")

	commitEach(t, s, a, "cq", "a", "a0", "a1", "a2", "a3")
	commitEach(t, s, b, "cq", "b", "b0", "b1")
	commitEach(t, s, young, "cq", "young", "y0")
	commitEach(t, s, lone, "nogroups", "p", "l0")
	// a: g1 committed everything, g2 up to offset 1.
	ack(t, s, ackAt(a, "g1", 3), ackAt(a, "g2", 1))
	// b: g1 committed everything; g2 (a group of the queue) never touched b.
	ack(t, s, ackAt(b, "g1", 1))
	// young: both committed, but it is not old enough.
	ack(t, s, ackAt(young, "g1", 0), ackAt(young, "g2", 0))
	for _, pid := range []uuid.UUID{a, b, lone} {
		age(t, s, pid, 120*time.Second)
	}

	c := step(t, s, RetentionConfig{})
	require.Equal(t, RetentionStepCount{Statements: 1, Rows: 2, Messages: 2}, c.Completed)
	require.Zero(t, c.Expired.Rows)
	require.Equal(t, []int64{2, 3}, segmentOffsets(t, s, a), "g2 has not committed past offset 1")
	require.Equal(t, []int64{0, 1}, segmentOffsets(t, s, b), "g2 consumed nothing of b")
	require.Equal(t, []int64{0}, segmentOffsets(t, s, young), "younger than completedRetentionSeconds")
	require.Equal(t, []int64{0}, segmentOffsets(t, s, lone), "a queue without consumer groups has nothing completed")

	// g2 catches up in a: the rest of a goes.
	ack(t, s, ackAt(a, "g2", 3))
	c = step(t, s, RetentionConfig{})
	require.Equal(t, int64(2), c.Completed.Rows)
	require.Empty(t, segmentOffsets(t, s, a))

	// A group that subscribed by popping another partition counts in b too.
	configure(t, s, "sub", `{"completedRetentionSeconds":60}`)
	s1 := partition(t, s, "sub", "s1")
	s2 := partition(t, s, "sub", "s2")
	commitEach(t, s, s1, "sub", "s1", "x0")
	commitEach(t, s, s2, "sub", "s2", "z0")
	ack(t, s, ackAt(s2, "g1", 0))
	_, st := pop(t, s, s1, "g3", 1) // g3 subscribes; its cursor in s2 is -1
	require.Equal(t, queen.PopDelivered, st)
	age(t, s, s2, 120*time.Second)
	step(t, s, RetentionConfig{})
	require.Equal(t, []int64{0}, segmentOffsets(t, s, s2), "g3 has not consumed s2")
}

// TestSidecarExpiresPastEveryQueuesFloor: the sidecar's entries are
// self-contained (migration 0017) and go by time alone, once older than the
// largest floor over all queues, GREATEST(dedupWindowSeconds,
// completedRetentionSeconds, the floor): the rows of the DEFAULT partition
// one by one (here: aged 600 s, a time no range covers), the ranges whole.
// Until then an ack by transactionId resolves; a repeat outside its own
// queue's window is a new message all the same.
func TestSidecarExpiresPastEveryQueuesFloor(t *testing.T) {
	t.Parallel()
	s := setup(t)
	low := RetentionConfig{TxnsFloor: time.Second}
	configure(t, s, "w", `{"dedupWindowSeconds":30}`)
	configure(t, s, "cr", `{"dedupWindowSeconds":30,"completedRetentionSeconds":300}`)
	configure(t, s, "long", `{"dedupWindowSeconds":3000}`)
	configure(t, s, "zero", `{"dedupWindowSeconds":0}`)
	w := partition(t, s, "w", "p")
	cr := partition(t, s, "cr", "p")
	long := partition(t, s, "long", "p")
	zero := partition(t, s, "zero", "p")
	commitEach(t, s, w, "w", "p", "m0", "m1")
	commitEach(t, s, cr, "cr", "p", "c0")
	commitEach(t, s, long, "long", "p", "l0")
	commitEach(t, s, zero, "zero", "p", "z0")
	for _, pid := range []uuid.UUID{w, cr, long, zero} {
		age(t, s, pid, 600*time.Second)
	}

	// long's window (3000 s) is the largest floor: every entry stays, the
	// production floor (900 s) or not.
	c := step(t, s, RetentionConfig{})
	require.Zero(t, c.Sidecar.Rows)
	c = step(t, s, low)
	require.Zero(t, c.Sidecar.Rows)
	require.Equal(t, rowCounts{Segments: 2, Messages: 2, Hashes: 2}, counts(t, s, w))
	require.Equal(t, []queen.AckOutcome{queen.Acked}, ack(t, s, ackTxn(w, g, "m0", queen.AckCompleted, nil)))
	out := commit(t, s, w, items("w", "p", "m1"))
	require.Equal(t, queen.Queued, out.Results[0].Verdict, "600 s is outside w's window (30 s)")
	require.Equal(t, int64(2), out.Results[0].Offset)

	// The largest floor is now cr's completedRetentionSeconds (300 s): the
	// entries aged 600 s go, the new one stays.
	configure(t, s, "long", `{"dedupWindowSeconds":30}`)
	c = step(t, s, low)
	require.Equal(t, int64(5), c.Sidecar.Rows, "m0, m1, c0, l0 and z0")
	require.Equal(t, rowCounts{Segments: 3, Messages: 3, Hashes: 1}, counts(t, s, w))
	for _, pid := range []uuid.UUID{cr, long, zero} {
		require.Equal(t, rowCounts{Segments: 1, Messages: 1}, counts(t, s, pid))
	}
	// An ack by transactionId of an expired entry is unresolvable; by offset
	// it still commits.
	require.Equal(t, []queen.AckOutcome{queen.Unresolvable}, ack(t, s, ackTxn(long, g, "l0", queen.AckCompleted, nil)))
	require.Equal(t, []queen.AckOutcome{queen.Acked}, ack(t, s, ackAt(long, g, 0)))
}

func TestDuplicateOfRetainedOriginalHasZeroID(t *testing.T) {
	t.Parallel()
	s := setup(t)
	configure(t, s, "dz", `{"retentionSeconds":60}`) // window 3600 s
	pid := partition(t, s, "dz", "p")
	first := commit(t, s, pid, items("dz", "p", "m1"))
	require.Equal(t, queen.Queued, first.Results[0].Verdict)
	age(t, s, pid, 120*time.Second)

	c := step(t, s, RetentionConfig{})
	require.Equal(t, int64(1), c.Expired.Rows)
	require.Zero(t, c.Sidecar.Rows, "the sidecar entry is inside the window")
	require.Equal(t, rowCounts{Hashes: 1}, counts(t, s, pid))

	again := commit(t, s, pid, items("dz", "p", "m1", "m2"))
	require.Equal(t, []queen.Verdict{queen.Duplicate, queen.Queued}, verdicts(again))
	require.Equal(t, queen.ZeroUUID, again.Results[0].MessageID, "the original's segment is gone")
	require.Equal(t, int64(0), again.Results[0].Offset)
	require.Equal(t, int64(1), again.Results[1].Offset, "the duplicate allocated nothing")
	require.Equal(t, rowCounts{Segments: 1, Messages: 1, Hashes: 2}, counts(t, s, pid), "only m2 was written")
}

func TestRetentionBoundedBatches(t *testing.T) {
	t.Parallel()
	s := setup(t)
	configure(t, s, "bb", `{"retentionSeconds":60,"dedupWindowSeconds":1}`)
	cfg := RetentionConfig{Batch: 10, TxnsFloor: time.Second}
	// 35 one-message segments over three partitions.
	var pids []uuid.UUID
	for i, n := range []int{12, 12, 11} {
		name := fmt.Sprintf("p%d", i)
		pid := partition(t, s, "bb", name)
		pids = append(pids, pid)
		for j := range n {
			commitEach(t, s, pid, "bb", name, fmt.Sprintf("%s-%d", name, j))
		}
		age(t, s, pid, 120*time.Second)
	}
	c := step(t, s, cfg)
	require.Equal(t, RetentionStepCount{Statements: 4, Rows: 35, Messages: 35}, c.Expired, "10+10+10+5")
	require.Equal(t, RetentionStepCount{Statements: 4, Rows: 35, Messages: 35}, c.Sidecar)
	for _, pid := range pids {
		require.Equal(t, rowCounts{}, counts(t, s, pid))
	}

	// A statement stops taking segments once they hold a batch of messages:
	// six segments of 4 messages go 3 by 3 (12 messages each time).
	big := partition(t, s, "bb", "big")
	for j := range 6 {
		commit(t, s, big, items("bb", "big", fmt.Sprintf("a%d", j), fmt.Sprintf("b%d", j), fmt.Sprintf("c%d", j), fmt.Sprintf("d%d", j)))
	}
	age(t, s, big, 120*time.Second)
	c = step(t, s, cfg)
	require.Equal(t, RetentionStepCount{Statements: 3, Rows: 6, Messages: 24}, c.Expired)
	// The sidecar's DEFAULT partition holds one row per message.
	require.Equal(t, RetentionStepCount{Statements: 3, Rows: 24, Messages: 24}, c.Sidecar)

	// One segment larger than the batch goes whole, in one statement.
	commit(t, s, big, items("bb", "big", "e0", "e1", "e2", "e3", "e4", "e5", "e6", "e7", "e8", "e9", "e10", "e11"))
	age(t, s, big, 120*time.Second)
	c = step(t, s, cfg)
	require.Equal(t, RetentionStepCount{Statements: 2, Rows: 1, Messages: 12}, c.Expired)
}

// TestRetentionNeverBlocksPushes: retention takes no partition write lock,
// so it runs while a push holds one, and pushes run while it steps.
func TestRetentionNeverBlocksPushes(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	configure(t, s, "nb", `{"retentionSeconds":60,"dedupWindowSeconds":60}`)
	cfg := RetentionConfig{Batch: 10, TxnsFloor: time.Second}
	pid := partition(t, s, "nb", "p")
	commitEach(t, s, pid, "nb", "p", "old-a", "old-b", "old-c")
	age(t, s, pid, 120*time.Second)

	// A transaction holds the partition's write lock, as a push in flight does.
	holder, err := s.pool.Begin(ctx)
	require.NoError(t, err)
	defer holder.Rollback(ctx) //nolint:errcheck // a failing step must not leave the Store's cleanup waiting
	_, err = holder.Exec(ctx, `SELECT 1 FROM queen.partition_ends WHERE partition_id = $1 FOR UPDATE`, pid)
	require.NoError(t, err)
	c := step(t, s, cfg) // under a 30 s deadline: it would hang on the lock
	require.NoError(t, holder.Rollback(ctx))
	require.Equal(t, int64(3), c.Expired.Rows)
	require.Equal(t, int64(3), c.Sidecar.Rows)

	// A long step (200 old segments, batches of 10) with pushes to the same
	// partition running all along, every push under a deadline.
	for j := range 200 {
		commitEach(t, s, pid, "nb", "p", fmt.Sprintf("old-%d", j))
	}
	age(t, s, pid, 120*time.Second)
	pushCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	stop := make(chan struct{})
	pushed := make(chan int, 1)
	errs := make(chan error, 1)
	go func() {
		j := 0
		defer func() { pushed <- j }()
		for ; ; j++ {
			select {
			case <-stop:
				return
			default:
			}
			its := items("nb", "p", fmt.Sprintf("new-%d", j))
			out, err := s.Commit(pushCtx, &queen.PushBatch{PartitionID: pid, Items: its, Watermark: -1})
			if err == nil && out.Results[0].Verdict != queen.Queued {
				err = fmt.Errorf("push %d: verdict %v", j, out.Results[0].Verdict)
			}
			if err != nil {
				errs <- err
				return
			}
		}
	}()
	c = step(t, s, cfg)
	close(stop)
	n := <-pushed
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	require.NoError(t, pushCtx.Err(), "every push finished before its deadline")
	require.Equal(t, RetentionStepCount{Statements: 21, Rows: 200, Messages: 200}, c.Expired)
	require.Equal(t, RetentionStepCount{Statements: 21, Rows: 200, Messages: 200}, c.Sidecar)
	require.Equal(t, rowCounts{Segments: int64(n), Messages: int64(n), Hashes: int64(n)}, counts(t, s, pid), "the young pushes stay")
	t.Logf("%d pushes committed during the step", n)
}

func TestRetentionLoopOneAtATime(t *testing.T) {
	t.Parallel()
	s := setup(t)
	configure(t, s, "one", `{"retentionSeconds":60}`)
	pid := partition(t, s, "one", "p")
	cfg := RetentionConfig{Interval: 10 * time.Millisecond, Logger: quiet}
	a, b := startRetention(t, s, cfg), startRetention(t, s, cfg)

	leader, other := waitLeader(t, a, b)
	commitEach(t, s, pid, "one", "p", "m0", "m1")
	age(t, s, pid, 120*time.Second)
	waitFor(t, "the leader deletes the old segments", func() bool { c, _ := leader.Totals(); return c.Expired.Rows == 2 })
	require.Equal(t, int64(0), counts(t, s, pid).Segments)
	ot, passes := other.Totals()
	require.False(t, ot.Deleted())
	require.Zero(t, passes, "a loop without the lock never runs a pass")
	require.False(t, other.Leader())

	// The leader stops; the other takes over.
	require.NoError(t, leader.Stop(context.Background()))
	// Read the leader's totals only once its loop has returned: a running
	// 10 ms loop keeps counting passes and statements.
	lt, _ := leader.Totals()
	require.False(t, leader.Leader())
	waitFor(t, "the other loop takes the lock", other.Leader)
	commitEach(t, s, pid, "one", "p", "m2")
	age(t, s, pid, 120*time.Second)
	waitFor(t, "the new leader deletes", func() bool { c, _ := other.Totals(); return c.Expired.Rows == 1 })
	require.Equal(t, int64(0), counts(t, s, pid).Segments)
	after, _ := leader.Totals()
	require.Equal(t, lt, after, "a stopped loop deletes nothing")
}

func TestRetentionLoopReacquiresAfterLosingItsConnection(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	configure(t, s, "re", `{"retentionSeconds":60}`)
	pid := partition(t, s, "re", "p")
	r := startRetention(t, s, RetentionConfig{Interval: 10 * time.Millisecond, Logger: quiet})
	waitFor(t, "the loop leads", r.Leader)

	var killed bool
	require.NoError(t, s.pool.QueryRow(ctx, `SELECT bool_and(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = 'queen-retention' AND datname = current_database()`).Scan(&killed))
	require.True(t, killed)
	commitEach(t, s, pid, "re", "p", "m0")
	age(t, s, pid, 120*time.Second)
	waitFor(t, "deletes resume on a new connection", func() bool { return counts(t, s, pid).Segments == 0 })
	require.True(t, r.Leader())
	var holders int64
	require.NoError(t, s.pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' AND l.granted AND a.application_name = 'queen-retention' AND a.datname = current_database()`).Scan(&holders))
	require.Equal(t, int64(1), holders)

	require.NoError(t, r.Stop(ctx))
	require.NoError(t, r.Stop(ctx)) // idempotent
	require.False(t, r.Leader())
}

// startRetention starts a retention loop that stops with the test.
func startRetention(t *testing.T, s *Store, cfg RetentionConfig) *Retention {
	t.Helper()
	r, err := s.NewRetention(cfg)
	require.NoError(t, err)
	require.NoError(t, r.Start(context.Background()))
	t.Cleanup(func() { r.Stop(context.Background()) }) //nolint:errcheck
	return r
}

// TestNewRetentionRefusesInvalidSettings: a negative setting is refused,
// named; zero values take the defaults. No database is touched.
func TestNewRetentionRefusesInvalidSettings(t *testing.T) {
	t.Parallel()
	var s Store
	for _, c := range []struct {
		cfg     RetentionConfig
		setting string
	}{
		{RetentionConfig{Interval: -time.Second}, "RetentionConfig.Interval"},
		{RetentionConfig{Batch: -1}, "RetentionConfig.Batch"},
		{RetentionConfig{TxnsFloor: -time.Second}, "RetentionConfig.TxnsFloor"},
	} {
		_, err := s.NewRetention(c.cfg)
		require.ErrorContains(t, err, "persistence: "+c.setting+" is ")
	}
	r, err := s.NewRetention(RetentionConfig{})
	require.NoError(t, err)
	require.Equal(t, DefaultRetentionInterval, r.cfg.Interval)
	require.NoError(t, r.Stop(context.Background()), "a loop never started stops")
}

func waitLeader(t *testing.T, a, b *Retention) (leader, other *Retention) {
	t.Helper()
	waitFor(t, "one loop leads", func() bool { return a.Leader() || b.Leader() })
	require.False(t, a.Leader() && b.Leader(), "two loops lead")
	if a.Leader() {
		return a, b
	}
	return b, a
}

// waitFor polls cond until it holds, failing after 20 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 20 s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
