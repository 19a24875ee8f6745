package persistence

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"sort"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/rules"
)

// pgSince and pgUntil give the span's ends as timestamptz, an unbounded
// end as -infinity or infinity.
func pgSince(sp queen.Span) pgtype.Timestamptz {
	if sp.Since.IsZero() {
		return pgtype.Timestamptz{InfinityModifier: pgtype.NegativeInfinity, Valid: true}
	}
	return pgtype.Timestamptz{Time: sp.Since, Valid: true}
}

func pgUntil(sp queen.Span) pgtype.Timestamptz {
	if sp.Until.IsZero() {
		return pgtype.Timestamptz{InfinityModifier: pgtype.Infinity, Valid: true}
	}
	return pgtype.Timestamptz{Time: sp.Until, Valid: true}
}

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

// probeArgs gathers bundle_probe's parallel arrays for the partitions of a
// bundle or a transaction, one partition at a time (add), in the order
// their rows are locked.
//
// A partition the cache vouches for (idle: a watermark, a window assumed,
// no suspect) is not sent: under its row lock it needs no lookup unless its
// allocator moved past the watermark (another writer) or its queue's window
// is now wider than the cache assumed, and the first round trip tells both
// (bundle_lock's ends, the probe's queue rows). rest gathers those for a
// second probe. Spread traffic is mostly idle partitions: a probe row each
// cost about as much as the lookups of the rest (issue 42).
type probeArgs struct {
	pids, hashes []pgtype.UUID
	wms, assumed []int64
	lo, hi       []int32
	suspect      []bool
	since, until []pgtype.Timestamptz
	queues       []string
	// names is the distinct queues of every partition added, idle or not:
	// the probe reads their windows.
	names []string
	idle  []idlePartition
}

// idlePartition is a partition probeArgs.add kept out of the probe.
type idlePartition struct {
	b           *queen.PushBatch
	wm, assumed int64
}

// add gathers b's partition: its leaders' hashes (b.Suspects marks the
// cache's suspects, with the span each was seen in), looked up above
// offset wm (-1: the whole window) under the window the cache assumed
// (seconds; 0: none). A partition with wm >= 0, assumed > 0 and no suspect
// is kept idle.
func (p *probeArgs) add(b *queen.PushBatch, wm, assumed int64) {
	q := b.Items[0].Queue
	if !slices.Contains(p.names, q) {
		p.names = append(p.names, q)
	}
	if wm >= 0 && assumed > 0 && !anySuspect(b) {
		p.idle = append(p.idle, idlePartition{b: b, wm: wm, assumed: assumed})
		return
	}
	p.send(b, wm, assumed)
}

// send puts b's partition in the probe's arrays.
func (p *probeArgs) send(b *queen.PushBatch, wm, assumed int64) {
	lo := len(p.hashes) + 1
	for j, it := range b.Items {
		if leaderOf(b, j) == j {
			p.hashes = append(p.hashes, pgUUID(it.Hash))
			sp, sus := b.Suspects[it.Hash]
			p.suspect = append(p.suspect, sus)
			p.since = append(p.since, pgSince(sp))
			p.until = append(p.until, pgUntil(sp))
		}
	}
	p.pids = append(p.pids, pgUUID(b.PartitionID))
	p.queues = append(p.queues, b.Items[0].Queue)
	p.wms = append(p.wms, wm)
	p.assumed = append(p.assumed, assumed)
	p.lo = append(p.lo, int32(lo))
	p.hi = append(p.hi, int32(len(p.hashes)))
}

// anySuspect reports whether one of b's leaders is a suspect of the cache.
func anySuspect(b *queen.PushBatch) bool {
	if len(b.Suspects) == 0 {
		return false
	}
	for j, it := range b.Items {
		if _, sus := b.Suspects[it.Hash]; sus && leaderOf(b, j) == j {
			return true
		}
	}
	return false
}

// rest gathers, after the first probe (locked holds each partition's end
// and window), the idle partitions that need a lookup after all: their end
// is past the watermark (a write the cache has not seen), or their window
// is wider than the cache assumed. nil when there are none (the usual
// case).
func (p *probeArgs) rest(locked map[[16]byte]lockedPartition) *probeArgs {
	var r *probeArgs
	for _, ip := range p.idle {
		lp, held := locked[ip.b.PartitionID]
		if !held || lp.window <= 0 || (lp.last <= ip.wm && lp.window <= ip.assumed) {
			continue
		}
		if r == nil {
			r = &probeArgs{names: p.names}
		}
		r.send(ip.b, ip.wm, ip.assumed)
	}
	return r
}

// queue queues on pb the window probe of the partitions gathered
// (bundle_probe, between probe_plan_begin and plan_end); its rows give each
// locked partition its queue's window and options and fill hits (scan).
func (p *probeArgs) queue(pb *pgx.Batch, locked map[[16]byte]lockedPartition, hits map[[16]byte]map[queen.Hash]hit) {
	pb.Queue(sqlProbePlanBegin)
	pb.Queue(sqlBundleProbe, p.pids, p.hashes, p.wms, p.lo, p.hi, p.suspect, p.assumed, p.since, p.until, p.queues, p.names).Query(p.scan(locked, hits))
	pb.Queue(sqlPlanEnd)
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

// bundleRows is a bundle's or a transaction's writes, stamped st: per
// partition written (its allocator's bump, bundle_bump's parallel arrays:
// the end its offsets follow and its new end), per segment (one per run of
// queued items with the same producer in a partition, newSegment; the rows
// of copySegments) and per frame (its sidecar row, bundle_insert's parallel
// arrays); written lists the batches (indexes into bs) that have a segment;
// want the segments holding originals to compare payloads with, whose
// frames fill originals after the commit.
type bundleRows struct {
	st                   stamp
	stamped              bool // st read with the locks, before the bump
	bumpPIDs             []pgtype.UUID
	bumpFrom, bumpTo     []int64
	segNums              []int64
	segFirst, segLast    []int64
	segFrames, segHashes [][]byte
	segRetained          []bool
	segProducers         []string
	rowPIDs              []pgtype.UUID
	rowHashes            []pgtype.UUID
	rowOffsets           []int64
	rowSegments          []int64
	written              []int
	want                 map[segmentKey]struct{}
	originals            map[segmentKey][]byte
}

// addSegments adds partition pid's new segments (assign: consecutive
// offsets, at least one segment) to the rows, each with its frames' sidecar
// rows, and the partition's bump; num is the partition's number (bundle_lock
// or its actor), retained: its queue has retentionSeconds.
func (w *bundleRows) addSegments(pid [16]byte, num int64, segs []newSegment, retained bool) {
	w.bumpPIDs = append(w.bumpPIDs, pgUUID(pid))
	w.bumpFrom = append(w.bumpFrom, segs[0].first-1)
	w.bumpTo = append(w.bumpTo, segs[len(segs)-1].last)
	for _, sg := range segs {
		w.segNums = append(w.segNums, num)
		w.segFirst = append(w.segFirst, sg.first)
		w.segLast = append(w.segLast, sg.last)
		w.segFrames = append(w.segFrames, sg.frames)
		w.segHashes = append(w.segHashes, sg.hashes)
		w.segRetained = append(w.segRetained, retained)
		w.segProducers = append(w.segProducers, sg.producer)
		for j, k := range sg.keys {
			w.rowPIDs = append(w.rowPIDs, pgUUID(pid))
			w.rowHashes = append(w.rowHashes, pgUUID(k))
			w.rowOffsets = append(w.rowOffsets, sg.first+int64(j))
			w.rowSegments = append(w.rowSegments, sg.first)
		}
	}
}

// segmentColumns are the columns copySegments writes, in its rows' order.
// A segment stores no message ids (layout 3, migration 0022): readers
// derive them (messageID); legacy_ids keeps its default, an empty bytea. It
// names its partition by number (layout 4, migration 0025).
var segmentColumns = []string{"partition_num", "first_offset", "last_offset", "created_at", "frames", "hashes", "timed", "producer_sub"}

// copyer is what copySegments writes through: a pooled session or a
// transaction.
type copyer interface {
	CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, rows pgx.CopyFromSource) (int64, error)
}

// copySegments writes the segments with COPY (one WAL record per page of
// rows, where an INSERT of the same rows writes one per row: about 45 B of
// WAL less per segment, most of a message's share when traffic is spread
// thin), stamped w.st.at; a segment of a queue with retentionSeconds goes
// to segments_timed when a range holds the stamp, else to segments_kept
// (bundle_stamp). Nothing is sent when there is no segment.
func (w *bundleRows) copySegments(ctx context.Context, c copyer) error {
	if len(w.segNums) == 0 {
		return nil
	}
	_, err := c.CopyFrom(ctx, pgx.Identifier{"queen", "segments"}, segmentColumns, pgx.CopyFromSlice(len(w.segNums), func(i int) ([]any, error) {
		return []any{w.segNums[i], w.segFirst[i], w.segLast[i], w.st.at, w.segFrames[i], w.segHashes[i],
			w.segRetained[i] && w.st.ranged, w.segProducers[i]}, nil
	}))
	return err
}

// insertArgs are bundle_insert's arguments, $1 to $5.
func (w *bundleRows) insertArgs() []any {
	return []any{w.st.at, w.rowPIDs, w.rowHashes, w.rowOffsets, w.rowSegments}
}

// queueBump queues bundle_bump on pb: the allocators' bump, which takes
// the row locks the commit does not hold yet; *bumped gets the number of
// allocators bumped (fewer than w.bumpPIDs: a partition did not end where
// its offsets assumed).
func (w *bundleRows) queueBump(pb *pgx.Batch, bumped *int) {
	pb.Queue(sqlBundleBump, w.bumpPIDs, w.bumpFrom, w.bumpTo).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			*bumped++
		}
		return rows.Err()
	})
}

// bundleWrites assigns each locked partition's verdicts and offsets
// (assign: rules.Assign over the probe's hits) into outs and gathers the
// rows to write.
func (s *Store) bundleWrites(bs []*queen.PushBatch, outs []queen.PushOutcome, order []int, lk *bundleLocks) *bundleRows {
	w := &bundleRows{st: lk.stamp, stamped: lk.stamped, want: map[segmentKey]struct{}{}, originals: map[segmentKey][]byte{}}
	for _, i := range order {
		b, out := bs[i], &outs[i]
		lp := lk.locked[b.PartitionID]
		out.Window = lp.window
		out.FullProbe = b.Watermark < 0
		out.PartitionNum = lp.num
		// Unless every row was locked first, the stamp is read at the bump:
		// the new messages' ids, which derive from it, are set then
		// (stampIDs).
		segs, clean := s.assign(b, lp.window, lp.last, lk.hits[b.PartitionID], lk.stamp.at, out)
		if lp.checkPayload {
			wantOriginals(b, out, lk.hits[b.PartitionID], w.want)
		}
		if clean == 0 {
			continue
		}
		w.written = append(w.written, i)
		w.addSegments(b.PartitionID, lp.num, segs, lp.retained)
	}
	return w
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

type hit struct {
	offset int64
	id     uuid.UUID
	// segment is the first offset of the segment holding the original.
	segment int64
}

// segmentKey names one segment: partition id and first offset.
type segmentKey struct {
	partition [16]byte
	first     int64
}

// wantOriginals adds to want the segments holding the originals of b's
// duplicates that were not written in this batch (a follower of a queued
// leader is compared with the leader's payload, no read), for a queue with
// dedupCheckPayload (SPEC.md §6). Originals whose segment is gone (ZeroUUID)
// are not compared.
func wantOriginals(b *queen.PushBatch, out *queen.PushOutcome, hits map[queen.Hash]hit, want map[segmentKey]struct{}) {
	for i, r := range out.Results {
		if r.Verdict != queen.Duplicate || out.Results[leaderOf(b, i)].Verdict == queen.Queued {
			continue
		}
		if h, ok := hits[b.Items[i].Hash]; ok && h.id != queen.ZeroUUID {
			want[segmentKey{b.PartitionID, h.segment}] = struct{}{}
		}
	}
}

// queueOriginals queues bundle_originals for the segments in want (nothing
// when want is empty); its rows fill originals with each segment's packed
// frames, decompressed once here (a segment that does not decode is left
// out: its duplicates stay unmarked).
func queueOriginals(pb *pgx.Batch, want map[segmentKey]struct{}, originals map[segmentKey][]byte) {
	if len(want) == 0 {
		return
	}
	pids := make([]pgtype.UUID, 0, len(want))
	firsts := make([]int64, 0, len(want))
	for k := range want {
		pids = append(pids, pgUUID(k.partition))
		firsts = append(firsts, k.first)
	}
	pb.Queue(sqlBundleOriginals, pids, firsts).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var k segmentKey
			var frames []byte
			if err := rows.Scan(&k.partition, &k.first, &frames); err != nil {
				return err
			}
			if frames, err := unpackSegment(frames, nil); err == nil {
				originals[k] = frames
			}
		}
		return rows.Err()
	})
}

// markMismatches sets PayloadMismatch on every duplicate of a partition whose
// queue has dedupCheckPayload on (in locked; their leaders' originals were read into
// originals, or were written by this batch) when its payload bytes differ
// from the original's as stored (SPEC.md §6). Payloads are stored as the
// client's JSON text, so the comparison is of that text. A duplicate whose
// original could not be read is left unmarked.
func markMismatches(bs []*queen.PushBatch, outs []queen.PushOutcome, locked map[[16]byte]lockedPartition, hits map[[16]byte]map[queen.Hash]hit, originals map[segmentKey][]byte) {
	for n, b := range bs {
		if !locked[b.PartitionID].checkPayload {
			continue
		}
		out := &outs[n]
		for i := range out.Results {
			r := &out.Results[i]
			if r.Verdict != queen.Duplicate {
				continue
			}
			var orig []byte
			if l := leaderOf(b, i); out.Results[l].Verdict == queen.Queued {
				orig = b.Items[l].Payload
			} else {
				h, ok := hits[b.PartitionID][b.Items[i].Hash]
				if !ok {
					continue
				}
				frames, ok := originals[segmentKey{b.PartitionID, h.segment}]
				if !ok {
					continue
				}
				p, err := FramePayload(frames, int(h.offset-h.segment))
				if err != nil {
					continue
				}
				orig = p
			}
			r.PayloadMismatch = !bytes.Equal(orig, b.Items[i].Payload)
		}
	}
}

// newSegment is one segment a commit writes: a run of consecutive queued
// items of one batch with the same producer (queen.Item.ProducerSub), their
// frames (as segments.frames stores them) and hashes, and the
// producer, stored once per segment (segments.producer_sub, "" for none).
type newSegment struct {
	first, last    int64
	frames, hashes []byte
	keys           [][16]byte
	producer       string
}

// assign gives verdicts under the lock (rules.Assign: leaders found by the
// probe are duplicates of the original, clean leaders get consecutive
// offsets after last in item order, followers echo their leader; with
// window 0 every item is clean) and packs the clean items' frames and
// hashes for the insert, the frames as segments.frames stores them
// (packSegment: compressed when that saves bytes). A queued item's message
// id is derived from its partition, offset and the commit's stamp at
// (messageID), as every reader derives it: segments store none. A zero at
// (the stamp not read yet: it is read at the bump) leaves the ids nil for
// stampIDs to set.
//
// A segment stores one producer, so the clean items are split into
// segments at each change of producer, in offset order: one segment when
// they share it (always with JWT off, and for the items of one request),
// one per run when the actor fused requests of different producers into
// this commit. The segments are consecutive offset ranges of the
// partition, like those of consecutive commits: readers see nothing
// different.
func (s *Store) assign(b *queen.PushBatch, window, last int64, hits map[queen.Hash]hit, at time.Time, out *queen.PushOutcome) (segs []newSegment, clean int) {
	clean = rules.Assign(out.Results, b.Items, b.LeaderOf, b.PartitionID, window, last, func(h queen.Hash) (rules.Original, bool) {
		x, ok := hits[h]
		return rules.Original{Offset: x.offset, MessageID: x.id}, ok
	}, func(off int64) uuid.UUID {
		if at.IsZero() {
			return uuid.Nil
		}
		return messageID(b.PartitionID, off, at)
	})
	out.FirstOffset, out.LastOffset = last+1, last+int64(clean)
	packed := 0 // clean items placed so far
	for i, it := range b.Items {
		r := &out.Results[i]
		if r.Verdict != queen.Queued {
			continue
		}
		if len(segs) == 0 || segs[len(segs)-1].producer != it.ProducerSub {
			if len(segs) > 0 {
				sg := &segs[len(segs)-1]
				sg.frames = packSegment(sg.frames)
			}
			n := clean - packed
			segs = append(segs, newSegment{first: r.Offset, producer: it.ProducerSub,
				frames: make([]byte, 0, 64*n), hashes: make([]byte, 0, 16*n), keys: make([][16]byte, 0, n)})
		}
		sg := &segs[len(segs)-1]
		sg.last = r.Offset
		sg.frames = AppendFrame(sg.frames, it.TransactionID, it.TraceID, it.Payload)
		sg.hashes = append(sg.hashes, it.Hash[:]...)
		sg.keys = append(sg.keys, it.Hash)
		packed++
	}
	if len(segs) > 0 {
		sg := &segs[len(segs)-1]
		sg.frames = packSegment(sg.frames)
	}
	return segs, clean
}

// bumpFirst bumps the allocators (bundle_bump, which takes the row locks of
// the partitions not locked yet) and reads the stamp (bundle_stamp), in one
// round trip, before anything else of the bundle is written. A partition
// that did not end where its offsets assumed, had no allocator row, or
// deadlocked with another writer rolls the transaction back: errEndMoved.
func (s *Store) bumpFirst(ctx context.Context, conn *session, w *bundleRows) error {
	start := time.Now()
	pb := &pgx.Batch{}
	bumped := 0
	w.queueBump(pb, &bumped)
	// Read after the bump: every write of the commit is stamped under all of
	// its row locks (SPEC.md §2).
	queueStamp(pb, &w.st)
	if err := conn.SendBatch(ctx, pb).Close(); err != nil {
		if deadlocked(err) {
			// Known partitions locked at the bump, in the order of its plan,
			// against another writer's: run again with every lock first.
			rollback(conn)
			s.observe(LockEvent{Op: "push", Moved: true})
			return errEndMoved
		}
		return s.notWritten(conn, err, start)
	}
	if bumped != len(w.bumpPIDs) {
		// A known partition moved, or lost its allocator row: nothing is
		// written yet.
		rollback(conn)
		s.observe(LockEvent{Op: "push", Moved: true})
		return errEndMoved
	}
	return nil
}

// stampIDs sets the message ids of b's new messages (out's offsets
// FirstOffset to LastOffset: the queued items and the duplicates that
// follow one of them), derived from their partition, offset and the
// commit's stamp at (messageID), once the stamp is read.
func stampIDs(b *queen.PushBatch, out *queen.PushOutcome, at time.Time) {
	for i := range out.Results {
		if r := &out.Results[i]; r.Offset >= out.FirstOffset && r.Offset <= out.LastOffset {
			r.MessageID = messageID(b.PartitionID, r.Offset, at)
		}
	}
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

// scan reads bundle_probe's rows (pushes and transactions): each queue's
// window row gives every locked partition of that queue (in p) its window,
// payload option and retention; each hit goes to hits (the lowest offset
// of a hash per partition is its original). A partition whose queue has no
// row (deleted) keeps window -1.
func (p *probeArgs) scan(locked map[[16]byte]lockedPartition, hits map[[16]byte]map[queen.Hash]hit) func(pgx.Rows) error {
	return func(rows pgx.Rows) error {
		windows := map[string]queueWindow{}
		for rows.Next() {
			var pid, k pgtype.UUID
			var seconds *int64
			var off *int64
			var mid []byte
			var check *bool
			var seg *int64
			var retained *bool
			var queue *string
			var created *time.Time
			if err := rows.Scan(&pid, &seconds, &k, &off, &mid, &check, &seg, &retained, &queue, &created); err != nil {
				return err
			}
			if queue != nil { // a queue's window row, applied below
				if seconds != nil {
					windows[*queue] = queueWindow{seconds: *seconds, check: check != nil && *check, retained: retained != nil && *retained}
				}
				continue
			}
			m := hits[pid.Bytes]
			if m == nil {
				m = map[queen.Hash]hit{}
				hits[pid.Bytes] = m
			}
			if old, ok := m[k.Bytes]; ok && old.offset < *off {
				continue // the lowest offset is the original
			}
			var at time.Time
			if created != nil {
				at = *created
			}
			h := hit{offset: *off, id: originalID(uuid.UUID(pid.Bytes), *off, at, mid)}
			if seg != nil {
				h.segment = *seg
			}
			m[k.Bytes] = h
		}
		if err := rows.Err(); err != nil {
			return err
		}
		// One pass over the partitions, whatever the number of queues.
		apply := func(pid [16]byte, q string) {
			w, ok := windows[q]
			lp, held := locked[pid]
			if !ok || !held {
				return
			}
			lp.window, lp.checkPayload, lp.retained = w.seconds, w.check, w.retained
			locked[pid] = lp
		}
		for i, q := range p.queues {
			apply(p.pids[i].Bytes, q)
		}
		for _, ip := range p.idle {
			apply(ip.b.PartitionID, ip.b.Items[0].Queue)
		}
		return nil
	}
}

// queueWindow is a queue's window row of bundle_probe: its window
// (seconds), dedupCheckPayload and whether it has retentionSeconds.
type queueWindow struct {
	seconds         int64
	check, retained bool
}

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
