package persistence

import (
	"bytes"
	"context"
	"errors"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	queen "github.com/queen-mq/queen-go"
)

// Commit runs the push transaction of SPEC.md §3 for one partition; it is
// CommitBundle of one batch.
func (s *Store) Commit(ctx context.Context, b *queen.PushBatch) (queen.PushOutcome, error) {
	outs, err := s.CommitBundle(ctx, []*queen.PushBatch{b})
	return outs[0], err
}

// CommitBundle runs the push transaction of SPEC.md §3 for several partitions
// at once, in one PostgreSQL transaction (DESIGN.md: throughput comes from
// fewer commits): one window probe above each partition's watermark, offsets
// for the clean items only, one segment per partition (its frames and
// hashes), each partition's row lock, commit. A duplicate writes nothing.
// Verdicts stay independent per partition. Each batch must name a distinct
// partition.
//
// Where a partition's row lock is taken (README, Architecture, "The write
// authority"): a batch whose actor knows the partition (Watermark >= 0 and
// PartitionNum, from an earlier outcome) is probed without it, and its lock
// is taken where its allocator is bumped, only if the partition still ends
// at the watermark; the others are locked first, in ascending partition id
// order (bundle_lock). When a partition moved meanwhile (another writer), or
// its allocator row is gone, nothing is written: the bundle is rolled back
// and run again at once with every row locked first. Either way each
// commit's writes are stamped under all of its row locks.
//
// It returns one queen.PushOutcome per batch, in order. On error every item of
// every batch is answered queen.Failed: queen.ErrUnavailable when the
// transaction certainly did not commit (queen.ErrStorageFull when the
// database is out of disk space, Store.StorageFull), queen.ErrCommitUnknown
// when the commit was sent but its outcome was lost, queen.ErrLockTimeout
// when a lock was not granted within Config.LockTimeout.
//
// Stuck locks (SPEC.md §3: a stuck partition never fails its neighbours):
// every lock wait is bounded by the session's lock_timeout
// (Config.LockTimeout, QUEEN_LOCK_TIMEOUT). When it cancels a bundle of
// several partitions (SQLSTATE 55P03), nothing was written and the bundle is
// run again at once with SKIP LOCKED: the partitions free at that moment are
// locked and committed as usual, and those another session still holds are
// answered failed with the retryable code lock_timeout (their queen.PushOutcome.Err
// set), without a second wait. A one-partition bundle is answered
// lock_timeout after the first wait. The cost: about one lock timeout plus
// one commit for the neighbours; the common path is unchanged (one
// statement locks every partition). A partition locked only for an instant
// by another transaction at the second attempt is answered lock_timeout
// too; a retry with the same transaction ids settles it.
func (s *Store) CommitBundle(ctx context.Context, bs []*queen.PushBatch) ([]queen.PushOutcome, error) {
	outs := make([]queen.PushOutcome, len(bs))
	err := s.commitBundle(ctx, bs, outs, lockKnownAtBump)
	if errors.Is(err, errEndMoved) {
		// A partition its actor knew had moved (or lost its allocator
		// row); nothing was written. Lock every row first and probe again.
		err = s.commitBundle(ctx, bs, outs, lockFirst)
	}
	if errors.Is(err, queen.ErrPartitionGone) && s.reresolve(ctx, bs) {
		// A queue was deleted while its partition ids were cached: the
		// partitions were created again under their names; commit once more
		// (nothing was written by the failed attempt).
		err = s.commitBundle(ctx, bs, outs, lockFirst)
	}
	if lockTimedOut(err) && nonEmpty(bs) > 1 {
		// A lock was not granted in time; nothing was written. Commit the
		// partitions that are free now, answer the held ones lock_timeout.
		err = s.commitBundle(ctx, bs, outs, lockSkipBusy)
	}
	if err != nil {
		qe := queen.AsError(unavailable(err))
		for i, b := range bs {
			outs[i] = failed(b, qe)
		}
		return outs, qe
	}
	return outs, nil
}

// reresolve looks every batch's partition up again by name (creating it if
// its queue was deleted) and reports whether any id changed.
func (s *Store) reresolve(ctx context.Context, bs []*queen.PushBatch) bool {
	changed := false
	for _, b := range bs {
		if len(b.Items) == 0 {
			continue
		}
		id, err := s.EnsurePartition(ctx, b.Items[0].Queue, b.Items[0].Partition)
		if err != nil {
			return false
		}
		if id != b.PartitionID {
			b.PartitionID, b.Watermark, b.Suspects, b.PartitionNum = id, -1, nil, 0
			changed = true
		}
	}
	return changed
}

// nonEmpty counts the batches with items.
func nonEmpty(bs []*queen.PushBatch) int {
	n := 0
	for _, b := range bs {
		if len(b.Items) > 0 {
			n++
		}
	}
	return n
}

func failed(b *queen.PushBatch, qe *queen.Error) queen.PushOutcome {
	out := queen.PushOutcome{Results: make([]queen.Result, len(b.Items)), LastOffset: -1, Err: qe}
	for i := range out.Results {
		out.Results[i] = queen.FailedResult(b.PartitionID, qe)
	}
	return out
}

type lockedPartition struct {
	last, window int64
	// num is the partition's number (queen.partitions.num), which its
	// segments store in place of its id (migration 0025).
	num int64
	// checkPayload is the queue's dedupCheckPayload, read with the window
	// (SPEC.md §6).
	checkPayload bool
	// retained: the queue has retentionSeconds, read with the window; its
	// segments go to segments_timed (bundle_stamp).
	retained bool
}

// lockMode is where an attempt of CommitBundle takes its partitions' row
// locks.
type lockMode int

const (
	// lockKnownAtBump: the partitions their actors know (a watermark and
	// the partition's number) at the allocators' bump, if they still end
	// at the watermark (bundle_bump); the others first (bundle_lock).
	lockKnownAtBump lockMode = iota
	// lockFirst: every partition first, in ascending id order.
	lockFirst
	// lockSkipBusy: lockFirst with SKIP LOCKED; the partitions another
	// session holds are answered lock_timeout.
	lockSkipBusy
)

// errEndMoved is an attempt's answer when a partition its actor knew no
// longer ended at the watermark at the bump, or had no allocator row:
// nothing was written (the attempt was rolled back before its segments).
var errEndMoved = errors.New("persistence: a partition moved since its actor's last commit")

// commitBundle runs one attempt of CommitBundle, its row locks taken as mode
// says (lockSkipBusy: the partitions another session holds are skipped, bundle_lock with SKIP LOCKED, and
// their outs answered lock_timeout; the others commit). The attempt is four
// round trips: lockBundle (BEGIN, the row locks of the partitions locked
// first, the window probe), then writeBundle (the allocators' bump, which
// takes the other row locks, and the stamp; the segments by COPY; the
// sidecar rows and COMMIT); between them assign decides each partition's
// verdicts and offsets. A pooled connection found dead at the first round
// trip (nothing can have committed) is replaced and the attempt run again
// once (Store.inSession, SPEC.md §9).
func (s *Store) commitBundle(ctx context.Context, bs []*queen.PushBatch, outs []queen.PushOutcome, mode lockMode) error {
	order := bundleOrder(bs)
	if len(order) == 0 {
		for i := range outs {
			outs[i] = queen.PushOutcome{Results: make([]queen.Result, len(bs[i].Items)), LastOffset: -1}
		}
		return nil
	}
	return s.inSession(ctx, func(conn *session) error {
		for i := range outs {
			outs[i] = queen.PushOutcome{Results: make([]queen.Result, len(bs[i].Items)), LastOffset: -1}
		}
		return s.commitOn(ctx, conn, bs, outs, order, mode)
	})
}

// commitOn runs commitBundle's attempt on conn, over the non-empty batches
// in lock order.
func (s *Store) commitOn(ctx context.Context, conn *session, bs []*queen.PushBatch, outs []queen.PushOutcome, order []int, mode lockMode) error {
	lk, err := s.lockBundle(ctx, conn, bs, order, mode)
	var lost *lostEnds
	if errors.As(err, &lost) {
		// A crash or a failover emptied some allocator rows (UNLOGGED,
		// migration 0019): rebuild them from what is logged, then lock
		// again. A partition still without one was deleted.
		if _, err := conn.Exec(ctx, sqlPartitionEndsEnsure, lost.ids); err != nil {
			return unavailable(err)
		}
		lk, err = s.lockBundle(ctx, conn, bs, order, mode)
	}
	if errors.As(err, &lost) {
		return lost.gone
	}
	if err != nil {
		return err
	}
	order = s.skipBusy(bs, outs, order, lk.busy)
	w := s.bundleWrites(bs, outs, order, lk)
	if len(w.written) == 0 {
		// Every item is a duplicate: nothing to write, nothing to undo.
		cb := &pgx.Batch{}
		cb.Queue("COMMIT")
		queueOriginals(cb, w.want, w.originals)
		if err := conn.SendBatch(ctx, cb).Close(); err != nil {
			// Nothing was written, so the verdicts stand whatever happened
			// (only the payload comparison may be lost).
			conn.Conn().Close(context.Background()) //nolint:errcheck
		}
		markMismatches(bs, outs, lk.locked, lk.hits, w.originals)
		return nil
	}
	if err := s.writeBundle(ctx, conn, bs, outs, w); err != nil {
		return err
	}
	markMismatches(bs, outs, lk.locked, lk.hits, w.originals)
	return nil
}

// bundleOrder is the indexes of bs's non-empty batches in the global lock
// order: ascending partition id (DESIGN.md), so bundles cannot deadlock.
func bundleOrder(bs []*queen.PushBatch) []int {
	order := make([]int, 0, len(bs))
	for i, b := range bs {
		if len(b.Items) > 0 {
			order = append(order, i)
		}
	}
	sort.Slice(order, func(a, b int) bool {
		return bytes.Compare(bs[order[a]].PartitionID[:], bs[order[b]].PartitionID[:]) < 0
	})
	return order
}

// bundleLocks is what the first round trip of a bundle learnt: each
// partition's end (its allocator, read under its row lock, or the watermark
// its actor expects it at), number, window and payload option; the window's
// hits by partition and hash; with lockSkipBusy, the partitions another
// session held. A transaction's also has the stamp.
type bundleLocks struct {
	locked map[[16]byte]lockedPartition
	hits   map[[16]byte]map[queen.Hash]hit
	busy   map[[16]byte]bool
	// stamp, when stamped: read in the first round trip, every row being
	// locked first; otherwise writeBundle reads it at the bump.
	stamp   stamp
	stamped bool
}

// stamp is the created_at of a commit's writes, read after all of its row
// locks were granted (bundle_stamp), and whether a range of segments_timed
// holds it.
type stamp struct {
	at     time.Time
	ranged bool
}

// queueStamp queues bundle_stamp on pb, after the statements that take the
// row locks; its row fills st.
func queueStamp(pb *pgx.Batch, st *stamp) {
	pb.Queue(sqlBundleStamp).QueryRow(func(r pgx.Row) error { return r.Scan(&st.at, &st.ranged) })
}

// knownEnd reports whether b's partition is known to its actor (a
// watermark, the partition's number): in lockKnownAtBump, in a bundle with
// at least Config.LockAtBumpFrom of them, its row lock is taken at the
// bump, where it must still end at the watermark.
func knownEnd(b *queen.PushBatch) bool {
	return b.Watermark >= 0 && b.PartitionNum > 0
}

// atBump reports whether the known partitions of the bundle's batches
// (order) are locked at the bump in this attempt.
func (s *Store) atBump(bs []*queen.PushBatch, order []int, mode lockMode) bool {
	if mode != lockKnownAtBump || s.atBumpFrom < 0 || len(order) < s.atBumpFrom {
		return false
	}
	n := 0
	for _, i := range order {
		if knownEnd(bs[i]) {
			n++
		}
	}
	return n >= s.atBumpFrom
}

// lockBundle opens the bundle's transaction, takes the row locks of the
// partitions to lock first (all but the known ones in lockKnownAtBump;
// bundle_lock in ascending id order, or in lockSkipBusy the same with SKIP
// LOCKED, then partition_ends_present) and runs the window probe
// (bundle_probe) for each partition's distinct incoming hashes, in one
// round trip. A known partition's end is its watermark until the bump says
// otherwise. A lock not granted within the lock timeout, a deleted
// partition (queen.ErrPartitionGone, retryable with the same ids) or a
// failed statement rolls back and returns the error.
func (s *Store) lockBundle(ctx context.Context, conn *session, bs []*queen.PushBatch, order []int, mode lockMode) (*bundleLocks, error) {
	lk := &bundleLocks{locked: make(map[[16]byte]lockedPartition, len(order)), hits: make(map[[16]byte]map[queen.Hash]hit)}
	atBump := s.atBump(bs, order, mode)
	// uuid arrays go to pgx as []pgtype.UUID: a registered type, encoded in
	// binary without reflection.
	ids := make([]pgtype.UUID, 0, len(order))
	var probe probeArgs
	for _, i := range order {
		b := bs[i]
		if atBump && knownEnd(b) {
			lk.locked[b.PartitionID] = lockedPartition{last: b.Watermark, num: b.PartitionNum, window: -1}
		} else {
			ids = append(ids, pgUUID(b.PartitionID))
		}
		probe.add(b, b.Watermark, b.AssumedWindow)
	}

	var wait float64
	pb := &pgx.Batch{}
	pb.Queue("BEGIN")
	var present map[[16]byte]bool
	switch {
	case mode == lockSkipBusy:
		present = map[[16]byte]bool{}
		pb.Queue(sqlBundleLockSkip, ids).Query(scanLocked(lk.locked, &wait))
		pb.Queue(sqlPartitionEndsPresent, ids).Query(scanPresent(present))
	case len(ids) > 0:
		pb.Queue(sqlBundleLock, ids).Query(scanLocked(lk.locked, &wait))
	}
	probe.queue(pb, lk.locked, lk.hits)
	if !atBump {
		// Every row is locked: the stamp is read now, and the bump goes
		// with the last round trip.
		queueStamp(pb, &lk.stamp)
		lk.stamped = true
	}
	start := time.Now()
	if err := conn.SendBatch(ctx, pb).Close(); err != nil {
		if lockTimedOut(err) {
			s.observe(LockEvent{Op: "push", Wait: time.Since(start), TimedOut: true})
		}
		rollback(conn)
		return nil, err
	}
	if mode == lockSkipBusy || len(ids) > 0 {
		// The lock wait of the partitions locked first; those locked at
		// the bump wait there, unmeasured unless the wait times out.
		s.observe(LockEvent{Op: "push", Wait: seconds(wait)})
	}
	if mode == lockSkipBusy {
		lk.busy = map[[16]byte]bool{}
		for id := range present {
			if _, ok := lk.locked[id]; !ok {
				lk.busy[id] = true
			}
		}
	}
	for _, lp := range lk.locked {
		if lp.window < 0 {
			rollback(conn)
			return nil, queen.ErrPartitionGone.With("push: a partition's queue was deleted; retry with the same transaction ids")
		}
	}
	if len(lk.locked)+len(lk.busy) != len(order) {
		rollback(conn)
		lost := &lostEnds{gone: queen.ErrPartitionGone.With("push: %d of %d partitions were deleted (their queue was deleted); retry with the same transaction ids", len(order)-len(lk.locked)-len(lk.busy), len(order))}
		for _, i := range order {
			pid := bs[i].PartitionID
			if _, ok := lk.locked[pid]; !ok && !lk.busy[pid] {
				lost.ids = append(lost.ids, pgUUID(pid))
			}
		}
		return nil, lost
	}
	if r := probe.rest(lk.locked); r != nil {
		// Partitions the cache vouched for that another writer moved, or
		// whose window grew: a second probe, in the same transaction.
		pb := &pgx.Batch{}
		r.queue(pb, lk.locked, lk.hits)
		if err := conn.SendBatch(ctx, pb).Close(); err != nil {
			rollback(conn)
			return nil, err
		}
	}
	return lk, nil
}

// lostEnds is lockBundle's answer when some partitions had no allocator row
// to lock (queen.partition_ends, migration 0019): deleted, or emptied by a
// crash (commitOn rebuilds those and locks again). gone is the error when
// they were deleted.
type lostEnds struct {
	ids  []pgtype.UUID
	gone error
}

func (e *lostEnds) Error() string { return e.gone.Error() }

func (e *lostEnds) Unwrap() error { return e.gone }

// skipBusy answers the partitions another session held (skipLocked)
// lock_timeout, not committed, and returns order without them.
func (s *Store) skipBusy(bs []*queen.PushBatch, outs []queen.PushOutcome, order []int, busy map[[16]byte]bool) []int {
	if len(busy) == 0 {
		return order
	}
	kept := order[:0:0]
	for _, i := range order {
		if busy[bs[i].PartitionID] {
			outs[i] = failed(bs[i], queen.ErrLockTimeout.With("push: the row lock of partition %q of queue %q was not granted within the lock timeout (%v, QUEEN_LOCK_TIMEOUT): another session holds it; the other partitions of the request were committed without it; retry with the same transaction ids",
				bs[i].Items[0].Partition, bs[i].Items[0].Queue, s.lockTimeout))
			continue
		}
		kept = append(kept, i)
	}
	return kept
}

// writeBundle writes the bundle's rows and commits. When some partitions
// are to be locked at the bump (the stamp not read yet), bumpFirst bumps
// the allocators and reads the stamp first (errEndMoved: nothing written),
// and the new messages' ids are set from that stamp; otherwise the bump
// goes with the last round trip. Then the segments (copySegments), the
// sidecar rows (bundle_insert) and COMMIT, and after it the originals to
// compare payloads with are read (never under the locks; its failure never
// fails the push). A statement the
// server refused rolls back (notWritten); a failure after the COMMIT was
// sent whose outcome is not known is queen.ErrCommitUnknown (the
// connection is closed).
func (s *Store) writeBundle(ctx context.Context, conn *session, bs []*queen.PushBatch, outs []queen.PushOutcome, w *bundleRows) error {
	if !w.stamped {
		if err := s.bumpFirst(ctx, conn, w); err != nil {
			return err
		}
		for _, i := range w.written {
			stampIDs(bs[i], &outs[i], w.st.at)
		}
	}
	cstart := time.Now()
	if err := w.copySegments(ctx, conn); err != nil {
		return s.notWritten(conn, err, cstart)
	}
	ib := &pgx.Batch{}
	if w.stamped {
		// Every row is locked (bundle_lock): each partition ends where its
		// offsets assumed.
		w.queueBump(ib, new(int))
	}
	ib.Queue(sqlBundleInsert, w.insertArgs()...)
	committed := queueCommit(conn, ib)
	// After the commit: the read never holds the row locks and its failure
	// never fails the push.
	queueOriginals(ib, w.want, w.originals)
	istart := time.Now()
	if err := conn.SendBatch(ctx, ib).Close(); err != nil && !*committed {
		var pgErr *pgconn.PgError
		if !lockTimedOut(err) && !errors.As(err, &pgErr) {
			conn.Conn().Close(context.Background()) //nolint:errcheck
			return queen.ErrCommitUnknown.With("push commit outcome unknown: %v", err)
		}
		// The server refused a statement (or ended the session, 57P01,
		// before the COMMIT ran): the transaction did not commit.
		notCommitted(conn)
		return s.notWritten(conn, err, istart)
	}
	for _, i := range w.written {
		outs[i].CreatedAt = w.st.at
	}
	return nil
}

// notWritten rolls back a bundle whose writes failed before its COMMIT
// was sent, or that the server refused, and returns err as the push's:
// the lock timeout of another session's DDL as it is (CommitBundle then
// commits the free partitions), a refused statement queen.ErrUnavailable
// (queen.ErrStorageFull when the disk is full), a broken connection as it
// is (nothing was committed; Store.inSession runs the attempt again).
// start is when the failed round trip was sent (the lock wait of
// /metrics).
func (s *Store) notWritten(conn *session, err error, start time.Time) error {
	rollback(conn)
	if lockTimedOut(err) {
		// A table lock (another session's DDL) was not granted in time.
		s.observe(LockEvent{Op: "push", Wait: time.Since(start), TimedOut: true})
		return err
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		if storageFull(err) {
			return storageFullError(err)
		}
		return queen.ErrUnavailable.With("push failed: %v", err)
	}
	return err
}

// scanLocked reads bundle_lock's rows: each locked partition's allocator
// and number, its window unknown (-1) until the probe reads it; *wait gets
// the longest lock wait, in seconds.
func scanLocked(locked map[[16]byte]lockedPartition, wait *float64) func(pgx.Rows) error {
	return func(rows pgx.Rows) error {
		for rows.Next() {
			var id [16]byte
			var lp lockedPartition
			var w float64
			if err := rows.Scan(&id, &lp.last, &lp.num, &w); err != nil {
				return err
			}
			lp.window = -1
			locked[id] = lp
			*wait = max(*wait, w)
		}
		return rows.Err()
	}
}

// scanPresent reads partition_ends_present's rows into present.
func scanPresent(present map[[16]byte]bool) func(pgx.Rows) error {
	return func(rows pgx.Rows) error {
		for rows.Next() {
			var id [16]byte
			if err := rows.Scan(&id); err != nil {
				return err
			}
			present[id] = true
		}
		return rows.Err()
	}
}

// seconds converts PostgreSQL's seconds to a Duration.
func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

func pgUUID(b [16]byte) pgtype.UUID { return pgtype.UUID{Bytes: b, Valid: true} }

func leaderOf(b *queen.PushBatch, i int) int {
	if b.LeaderOf == nil {
		return i
	}
	return int(b.LeaderOf[i])
}

// distinctLeaders returns the hashes to probe: one per leader.
func distinctLeaders(b *queen.PushBatch) [][16]byte {
	out := make([][16]byte, 0, len(b.Items))
	for i, it := range b.Items {
		if leaderOf(b, i) == i {
			out = append(out, it.Hash)
		}
	}
	return out
}

// rollback ends conn's transaction; a connection that cannot is closed
// (the pool then drops it).
func rollback(conn *session) {
	if _, err := conn.Exec(context.Background(), "ROLLBACK"); err != nil {
		conn.Conn().Close(context.Background()) //nolint:errcheck
	}
}
