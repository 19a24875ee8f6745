package persistence

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/persistence/pgtest"
)

func items(queueName, partition string, txns ...string) []*queen.Item {
	out := make([]*queen.Item, len(txns))
	for i, t := range txns {
		out[i] = &queen.Item{Queue: queueName, Partition: partition, TransactionID: t, Payload: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)), Hash: queen.HashTxn(t)}
	}
	return out
}

func leadersOf(its []*queen.Item) []int32 {
	out := make([]int32, len(its))
	seen := map[queen.Hash]int32{}
	for i, it := range its {
		if l, ok := seen[it.Hash]; ok {
			out[i] = l
		} else {
			seen[it.Hash] = int32(i)
			out[i] = int32(i)
		}
	}
	return out
}

func commit(t testing.TB, s *Store, pid uuid.UUID, its []*queen.Item) queen.PushOutcome {
	t.Helper()
	out, err := s.Commit(context.Background(), &queen.PushBatch{PartitionID: pid, Items: its, LeaderOf: leadersOf(its), Watermark: -1})
	require.NoError(t, err)
	return out
}

func verdicts(out queen.PushOutcome) []queen.Verdict {
	v := make([]queen.Verdict, len(out.Results))
	for i, r := range out.Results {
		v[i] = r.Verdict
	}
	return v
}

func TestCommitVerdictsAndOffsets(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	pid, err := s.EnsurePartition(ctx, "q", "p")
	require.NoError(t, err)
	pid2, err := s.EnsurePartition(ctx, "q", "p")
	require.NoError(t, err)
	require.Equal(t, pid, pid2, "EnsurePartition is idempotent")

	first := commit(t, s, pid, items("q", "p", "a", "b", "a"))
	require.Equal(t, []queen.Verdict{queen.Queued, queen.Queued, queen.Duplicate}, verdicts(first))
	require.Equal(t, int64(0), first.Results[0].Offset)
	require.Equal(t, int64(1), first.Results[1].Offset)
	require.Equal(t, first.Results[0].MessageID, first.Results[2].MessageID, "follower echoes the leader")
	require.Equal(t, int64(3600), first.Window)

	second := commit(t, s, pid, items("q", "p", "c", "b", "d"))
	require.Equal(t, []queen.Verdict{queen.Queued, queen.Duplicate, queen.Queued}, verdicts(second))
	require.Equal(t, first.Results[1].MessageID, second.Results[1].MessageID, "duplicate carries the original id")
	require.Equal(t, int64(1), second.Results[1].Offset)
	require.Equal(t, int64(2), second.Results[0].Offset)
	require.Equal(t, int64(3), second.Results[2].Offset, "offsets only for clean items, in request order")

	// The stored frames round-trip.
	var frames []byte
	seg := SegmentIDs{Partition: pid, First: 2}
	require.NoError(t, s.pool.QueryRow(ctx, `SELECT legacy_ids, created_at, frames FROM queen.segments WHERE partition_num = (SELECT num FROM queen.partitions WHERE id = $1) AND first_offset=2`, pid).Scan(&seg.Stored, &seg.At, &frames))
	require.Empty(t, seg.Stored, "segments store no message ids (layout 3)")
	fs, err := UnpackFrames(seg, frames)
	require.NoError(t, err)
	require.Len(t, fs, 2)
	require.Equal(t, "c", fs[0].TransactionID)
	require.Equal(t, "d", fs[1].TransactionID)
	require.Equal(t, second.Results[2].MessageID, fs[1].MessageID)
	require.JSONEq(t, `{"i":2}`, string(fs[1].Payload))

	// All duplicates: nothing written.
	third := commit(t, s, pid, items("q", "p", "a", "c"))
	require.Equal(t, []queen.Verdict{queen.Duplicate, queen.Duplicate}, verdicts(third))
	var segs int
	require.NoError(t, s.pool.QueryRow(ctx, `SELECT count(*) FROM queen.segments WHERE partition_num = (SELECT num FROM queen.partitions WHERE id = $1)`, pid).Scan(&segs))
	require.Equal(t, 2, segs)
}

func TestCommitWatermarkNarrowsProbe(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	pid, err := s.EnsurePartition(ctx, "q", "p")
	require.NoError(t, err)
	commit(t, s, pid, items("q", "p", "a"))
	commit(t, s, pid, items("q", "p", "b"))
	// A watermark at offset 0 vouches that "a" is not at or below 0 — a lie
	// the probe believes, which proves the bound is applied; "b" (offset 1)
	// is still found.
	// (found in the sidecar rows after the watermark).
	out, err := s.Commit(ctx, &queen.PushBatch{PartitionID: pid, Items: items("q", "p", "a", "b"), Watermark: 0, AssumedWindow: 3600})
	require.NoError(t, err)
	require.Equal(t, []queen.Verdict{queen.Queued, queen.Duplicate}, verdicts(out))

	// A suspect is looked up in the whole window, whatever the watermark.
	out, err = s.Commit(ctx, &queen.PushBatch{PartitionID: pid, Items: items("q", "p", "a", "c"), Watermark: 3, AssumedWindow: 3600,
		Suspects: map[queen.Hash]queen.Span{queen.HashTxn("a"): {}}})
	require.NoError(t, err)
	require.Equal(t, []queen.Verdict{queen.Duplicate, queen.Queued}, verdicts(out))
	require.Equal(t, int64(0), out.Results[0].Offset, "the lowest offset is the original")

	// A window wider than the cache assumed voids the watermark.
	out, err = s.Commit(ctx, &queen.PushBatch{PartitionID: pid, Items: items("q", "p", "b"), Watermark: 10, AssumedWindow: 60})
	require.NoError(t, err)
	require.Equal(t, []queen.Verdict{queen.Duplicate}, verdicts(out))
}

// A bundle's partitions the cache vouches for (a watermark, a window
// assumed, no suspect) are kept out of the first probe; those whose end
// moved past the watermark (another writer) or whose window grew get a
// second probe under the same locks (probeArgs.rest, issue 42).
func TestBundleVouchedPartitionsProbedWhenMoved(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	pids := make([]uuid.UUID, 4)
	for i := range pids {
		var err error
		pids[i], err = s.EnsurePartition(ctx, "q", fmt.Sprintf("p%d", i))
		require.NoError(t, err)
		commit(t, s, pids[i], items("q", fmt.Sprintf("p%d", i), "a"))
		commit(t, s, pids[i], items("q", fmt.Sprintf("p%d", i), "b"))
	}
	batch := func(i int, wm, assumed int64, txn string, sus bool) *queen.PushBatch {
		its := items("q", fmt.Sprintf("p%d", i), txn)
		b := &queen.PushBatch{PartitionID: pids[i], Items: its, Watermark: wm, AssumedWindow: assumed}
		if sus {
			b.Suspects = map[queen.Hash]queen.Span{its[0].Hash: {}}
		}
		return b
	}
	outs, err := s.CommitBundle(ctx, []*queen.PushBatch{
		// Vouched at its end: "b" is believed new (a lie that proves no
		// lookup ran).
		batch(0, 1, 3600, "b", false),
		// Vouched at offset 0, but its end is 1: probed after all.
		batch(1, 0, 3600, "b", false),
		// Vouched at its end under a narrower window than the queue's:
		// probed after all, in the whole window.
		batch(2, 1, 60, "a", false),
		// A suspect: probed in the first round trip.
		batch(3, 1, 3600, "a", true),
	})
	require.NoError(t, err)
	want := []queen.Verdict{queen.Queued, queen.Duplicate, queen.Duplicate, queen.Duplicate}
	for i, o := range outs {
		require.NoError(t, o.Err)
		require.Equal(t, want[i:i+1], verdicts(o), "partition p%d", i)
	}
	require.Equal(t, int64(1), outs[1].Results[0].Offset, "the original's offset is echoed")
	require.Equal(t, int64(0), outs[2].Results[0].Offset)
	require.Equal(t, int64(0), outs[3].Results[0].Offset)
}

func TestCommitWindowZero(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	_, err := s.Configure(ctx, queen.ConfigureRequest{Queue: "z", Options: queen.OptionsPatch{DedupWindowSeconds: new(int64(0))}})
	require.NoError(t, err)
	pid, err := s.EnsurePartition(ctx, "z", "p")
	require.NoError(t, err)
	for i := 0; i < 3; i++ {
		its := items("z", "p", "a", "a")
		out, err := s.Commit(ctx, &queen.PushBatch{PartitionID: pid, Items: its, LeaderOf: leadersOf(its), Watermark: -1})
		require.NoError(t, err)
		require.Equal(t, []queen.Verdict{queen.Queued, queen.Queued}, verdicts(out), "window 0: no check at all")
		require.Equal(t, int64(0), out.Window)
	}
	var n int64
	require.NoError(t, s.pool.QueryRow(ctx, `SELECT sum(length(hashes)/16) FROM queen.segments WHERE partition_num = (SELECT num FROM queen.partitions WHERE id = $1)`, pid).Scan(&n))
	require.Equal(t, int64(6), n, "the hashes are written with dedup off")

	// Back to the default window: the next push checks again.
	_, err = s.Configure(ctx, queen.ConfigureRequest{Queue: "z"})
	require.NoError(t, err)
	its := items("z", "p", "a", "new")
	out, err := s.Commit(ctx, &queen.PushBatch{PartitionID: pid, Items: its, LeaderOf: leadersOf(its), Watermark: -1})
	require.NoError(t, err)
	require.Equal(t, []queen.Verdict{queen.Duplicate, queen.Queued}, verdicts(out))
	require.Equal(t, int64(0), out.Results[0].Offset, "the lowest offset is the original")
	require.Equal(t, int64(3600), out.Window)
}

// TestWindowIsReadAfterTheLock: a push waiting for the partition lock while a
// configure changes the window 0 -> 3600 uses 3600 (SPEC.md §3: the window is
// read under the lock), so a repeat is a duplicate, not a second copy.
func TestWindowIsReadAfterTheLock(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	_, err := s.Configure(ctx, queen.ConfigureRequest{Queue: "w", Options: queen.OptionsPatch{DedupWindowSeconds: new(int64(0))}})
	require.NoError(t, err)
	pid, err := s.EnsurePartition(ctx, "w", "p")
	require.NoError(t, err)
	commit(t, s, pid, items("w", "p", "a"))

	holder, err := s.pool.Begin(ctx)
	require.NoError(t, err)
	defer holder.Rollback(ctx) //nolint:errcheck
	_, err = holder.Exec(ctx, `SELECT 1 FROM queen.partition_ends WHERE partition_id = $1 FOR UPDATE`, pid)
	require.NoError(t, err)

	type res struct {
		out queen.PushOutcome
		err error
	}
	done := make(chan res, 1)
	go func() {
		its := items("w", "p", "a")
		out, err := s.Commit(ctx, &queen.PushBatch{PartitionID: pid, Items: its, LeaderOf: leadersOf(its), Watermark: -1})
		done <- res{out, err}
	}()
	require.Eventually(t, func() bool {
		var waiting int
		err := s.pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE NOT granted AND locktype IN ('transactionid', 'tuple')`).Scan(&waiting)
		return err == nil && waiting > 0
	}, 10*time.Second, 5*time.Millisecond, "the push waits for the partition lock")
	_, err = s.Configure(ctx, queen.ConfigureRequest{Queue: "w"}) // back to 3600
	require.NoError(t, err)
	require.NoError(t, holder.Rollback(ctx))
	r := <-done
	require.NoError(t, r.err)
	require.Equal(t, int64(3600), r.out.Window)
	require.Equal(t, queen.Duplicate, r.out.Results[0].Verdict)
}

func TestDuplicateOfDeletedSegmentHasZeroID(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	pid, err := s.EnsurePartition(ctx, "q", "p")
	require.NoError(t, err)
	commit(t, s, pid, items("q", "p", "a"))
	_, err = s.pool.Exec(ctx, `DELETE FROM queen.segments WHERE partition_num = (SELECT num FROM queen.partitions WHERE id = $1)`, pid)
	require.NoError(t, err)
	out := commit(t, s, pid, items("q", "p", "a"))
	require.Equal(t, queen.Duplicate, out.Results[0].Verdict)
	require.Equal(t, queen.ZeroUUID, out.Results[0].MessageID)
}

func TestFrameRoundTrip(t *testing.T) {
	trace := "t-1"
	var ids, frames []byte
	want := []Frame{
		{MessageID: uuid.New(), TransactionID: "a", TraceID: &trace, Payload: []byte(`{"x":1}`)},
		{MessageID: uuid.New(), TransactionID: "日本", Payload: []byte(`[]`)},
		{MessageID: uuid.New(), TransactionID: "", Payload: []byte(`null`)},
	}
	for _, f := range want {
		ids = append(ids, f.MessageID[:]...)
		frames = AppendFrame(frames, f.TransactionID, f.TraceID, f.Payload)
	}
	got, err := UnpackFrames(StoredIDs(ids), frames)
	require.NoError(t, err)
	require.Equal(t, want, got)
	_, err = UnpackFrames(StoredIDs(ids), frames[:len(frames)-1])
	require.ErrorIs(t, err, ErrCorruptSegment)
	_, err = UnpackFrames(StoredIDs(ids[:20]), frames)
	require.ErrorIs(t, err, ErrCorruptSegment)
}

func TestCommitBundleKeepsPartitionsIndependent(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	var pids []uuid.UUID
	for _, p := range []string{"p1", "p2", "p3"} {
		pid, err := s.EnsurePartition(ctx, "q", p)
		require.NoError(t, err)
		pids = append(pids, pid)
	}
	commit(t, s, pids[0], items("q", "p1", "a"))
	mk := func(i int, txns ...string) *queen.PushBatch {
		its := items("q", fmt.Sprintf("p%d", i+1), txns...)
		return &queen.PushBatch{PartitionID: pids[i], Items: its, LeaderOf: leadersOf(its), Watermark: -1}
	}
	// The same ids in three partitions: only p1 has seen "a" before.
	outs, err := s.CommitBundle(ctx, []*queen.PushBatch{mk(2, "a", "b", "a"), mk(0, "a", "b"), mk(1, "a", "b")})
	require.NoError(t, err)
	require.Equal(t, []queen.Verdict{queen.Queued, queen.Queued, queen.Duplicate}, verdicts(outs[0]))
	require.Equal(t, []queen.Verdict{queen.Duplicate, queen.Queued}, verdicts(outs[1]))
	require.Equal(t, []queen.Verdict{queen.Queued, queen.Queued}, verdicts(outs[2]))
	require.Equal(t, int64(0), outs[1].Results[0].Offset)
	require.Equal(t, int64(1), outs[1].Results[1].Offset)
	require.Equal(t, int64(0), outs[2].Results[0].Offset)
	require.Equal(t, outs[0].CreatedAt, outs[2].CreatedAt, "one transaction, one timestamp")

	// An all-duplicate bundle writes nothing.
	outs, err = s.CommitBundle(ctx, []*queen.PushBatch{mk(0, "a"), mk(1, "b")})
	require.NoError(t, err)
	require.Equal(t, queen.Duplicate, outs[0].Results[0].Verdict)
	require.Equal(t, queen.Duplicate, outs[1].Results[0].Verdict)
	var segs, hashes int
	require.NoError(t, s.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM queen.segments), (SELECT count(*) FROM queen.log_txn_hashes)`).Scan(&segs, &hashes))
	require.Equal(t, 4, segs)
	require.Equal(t, 1+2+1+2, hashes)

	// Concurrent bundles over the same partitions in opposite orders never deadlock.
	errs := make(chan error, 20)
	for i := 0; i < 20; i++ {
		go func(i int) {
			a, b := mk(0, fmt.Sprintf("c%d", i)), mk(2, fmt.Sprintf("c%d", i))
			if i%2 == 1 {
				a, b = b, a
			}
			_, err := s.CommitBundle(ctx, []*queen.PushBatch{a, b})
			errs <- err
		}(i)
	}
	for i := 0; i < 20; i++ {
		require.NoError(t, <-errs)
	}
}

// TestBundleKnownPartitionMovedIsRunAgain (SPEC.md §2, §3; README,
// Architecture, "The write authority"): a batch whose actor knows its
// partition (a watermark and the partition's number) is probed before its
// row is locked, and its lock is taken at the allocator's bump, only where
// the partition still ends at the watermark. A partition another writer
// moved meanwhile, or whose allocator row a crash emptied, writes nothing
// in that attempt: the bundle runs again with every row locked first, so
// a repeat of the other writer's id is a duplicate, the offsets continue
// and the partitions beside it commit once.
func TestBundleKnownPartitionMovedIsRunAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// Every bundle locks its known partitions at the bump, however small.
	s, log := setupAtBump(t, 1)
	moved, lockedFirst := log.moved, log.lockedFirst
	pids := make([]uuid.UUID, 3)
	nums := make([]int64, 3)
	for i := range pids {
		pids[i] = partition(t, s, "kq", fmt.Sprintf("p%d", i))
		out := commit(t, s, pids[i], items("kq", fmt.Sprintf("p%d", i), "a"))
		require.Positive(t, out.PartitionNum, "an outcome names the partition's number")
		nums[i] = out.PartitionNum
	}
	known := func(i int, wm int64, txns ...string) *queen.PushBatch {
		its := items("kq", fmt.Sprintf("p%d", i), txns...)
		return &queen.PushBatch{PartitionID: pids[i], Items: its, LeaderOf: leadersOf(its), Watermark: wm, AssumedWindow: 3600, PartitionNum: nums[i]}
	}

	// Nothing moved: the rows are locked at the bump only.
	before := lockedFirst()
	outs, err := s.CommitBundle(ctx, []*queen.PushBatch{known(0, 0, "a2"), known(2, 0, "a2")})
	require.NoError(t, err)
	for i, o := range outs {
		require.Equal(t, []queen.Verdict{queen.Queued}, verdicts(o))
		require.Equal(t, int64(1), o.LastOffset, "batch %d", i)
	}
	require.Equal(t, before, lockedFirst(), "no partition was locked before the probe")
	require.Zero(t, moved())

	// Another writer (its actor's cache never saw it) stores "b" in p1.
	commit(t, s, pids[1], items("kq", "p1", "b"))
	// p1's actor still vouches at offset 0 and believes "b" new: no lookup
	// runs for it.
	outs, err = s.CommitBundle(ctx, []*queen.PushBatch{known(0, 1, "c"), known(1, 0, "b", "d"), known(2, 1, "e")})
	require.NoError(t, err)
	require.Equal(t, 1, moved(), "the first attempt found p1 moved")
	require.Equal(t, []queen.Verdict{queen.Queued}, verdicts(outs[0]))
	require.Equal(t, []queen.Verdict{queen.Duplicate, queen.Queued}, verdicts(outs[1]), "the moved partition is probed again under its lock")
	require.Equal(t, int64(1), outs[1].Results[0].Offset, "the original's offset is echoed")
	require.Equal(t, int64(2), outs[1].Results[1].Offset, "offsets continue after the other writer's")
	require.Equal(t, []queen.Verdict{queen.Queued}, verdicts(outs[2]))
	for i, o := range outs {
		require.Equal(t, nums[i], o.PartitionNum)
	}
	res, st := pop(t, s, pids[1], "g", 10)
	require.Equal(t, queen.PopDelivered, st)
	require.Equal(t, []string{"a", "b", "d"}, txns(res), "b is stored once")
	res, _ = pop(t, s, pids[0], "g", 10)
	require.Equal(t, []string{"a", "a2", "c"}, txns(res), "the partitions beside it commit once")
	require.Equal(t, outs[0].Results[0].MessageID.String(), res.Messages[2].ID, "a new message's id derives from the stamp read at the bump")
	require.Equal(t, outs[0].CreatedAt.UnixMicro(), res.Messages[2].CreatedAt.UnixMicro())

	// A crash empties the allocator rows: the bump finds none, the bundle
	// runs again and rebuilds them.
	crashAndRefill(t, s)
	outs, err = s.CommitBundle(ctx, []*queen.PushBatch{known(0, 2, "f"), known(2, 2, "g", "c")})
	require.NoError(t, err)
	require.Equal(t, 2, moved())
	require.Equal(t, []queen.Verdict{queen.Queued}, verdicts(outs[0]))
	require.Equal(t, int64(3), outs[0].Results[0].Offset)
	require.Equal(t, []queen.Verdict{queen.Queued, queen.Queued}, verdicts(outs[1]))
	require.Equal(t, int64(4), outs[1].Results[1].Offset, "offsets continue after the crash")
	for i, pid := range []uuid.UUID{pids[0], pids[2]} {
		last, _ := end(t, s, pid)
		require.Equal(t, outs[i].LastOffset, last, "the allocator row is rebuilt and bumped")
	}
}

// TestSmallBundleLocksFirst (Config.LockAtBumpFrom): a bundle with fewer
// known partitions than the bound locks every row before its probe and
// reads its stamp with the locks (no round trip for the bump); from the
// bound on, the known partitions are locked at the bump.
func TestSmallBundleLocksFirst(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, log := setupAtBump(t, 3)
	lockedFirst := log.lockedFirst
	pids := make([]uuid.UUID, 3)
	nums := make([]int64, 3)
	for i := range pids {
		pids[i] = partition(t, s, "sb", fmt.Sprintf("p%d", i))
		nums[i] = commit(t, s, pids[i], items("sb", fmt.Sprintf("p%d", i), "a")).PartitionNum
	}
	known := func(i int, txn string) *queen.PushBatch {
		its := items("sb", fmt.Sprintf("p%d", i), txn)
		return &queen.PushBatch{PartitionID: pids[i], Items: its, Watermark: 0, AssumedWindow: 3600, PartitionNum: nums[i]}
	}
	before := lockedFirst()
	outs, err := s.CommitBundle(ctx, []*queen.PushBatch{known(0, "b"), known(1, "b")})
	require.NoError(t, err)
	require.Equal(t, before+1, lockedFirst(), "two known partitions, under the bound of 3: locked first")
	for _, o := range outs {
		require.Equal(t, []queen.Verdict{queen.Queued}, verdicts(o))
		require.Equal(t, int64(1), o.LastOffset)
	}
	res, _ := pop(t, s, pids[0], "g", 10)
	require.Equal(t, outs[0].Results[0].MessageID.String(), res.Messages[1].ID, "ids derive from the stamp read with the locks")
	before = lockedFirst()
	outs, err = s.CommitBundle(ctx, []*queen.PushBatch{
		{PartitionID: pids[0], Items: items("sb", "p0", "c"), Watermark: 1, AssumedWindow: 3600, PartitionNum: nums[0]},
		{PartitionID: pids[1], Items: items("sb", "p1", "c"), Watermark: 1, AssumedWindow: 3600, PartitionNum: nums[1]},
		known(2, "c"),
	})
	require.NoError(t, err)
	require.Equal(t, before, lockedFirst(), "three known partitions: locked at the bump")
	for _, o := range outs {
		require.Equal(t, []queen.Verdict{queen.Queued}, verdicts(o))
	}
}

// setupAtBump returns a Store whose bundles lock their known partitions at
// the bump from `from` of them on (Config.LockAtBumpFrom), and its lock log.
func setupAtBump(t *testing.T, from int) (*Store, *lockLog) {
	t.Helper()
	log := &lockLog{}
	s, err := Open(context.Background(), Config{URL: pgtest.NewDatabase(t), LockAtBumpFrom: from, ObserveLock: log.observe})
	require.NoError(t, err)
	t.Cleanup(s.Close)
	return s, log
}
