package persistence

import (
	"bytes"
	"context"
	"errors"
	"sort"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/rules"
)

var (
	sqlTxnLeases = q("txn_leases")
)

// txnRef is where a push item sits in a transaction: operation and item index.
type txnRef struct{ op, item int }

// txnPartition is one partition a transaction pushes to: its items in
// request order (operation order, then item order) and where each came from.
type txnPartition struct {
	batch PushBatch
	refs  []txnRef
	out   PushOutcome
	seg   *txnSegment // what assign made to write; nil when nothing
}

// txnSegment is one partition's new segment, as assign builds it.
type txnSegment struct {
	msgIDs, frames, hashes []byte
	keys                   [][16]byte
}

// Transaction runs the operations of req in one PostgreSQL transaction
// (SPEC.md §5) and returns one result per operation, in order; on any error
// nothing of it is written.
//
// Pushes keep the push path's semantics (partitions and queues created on
// first use, the window read from the queue row under the row lock, a window
// of 0 checks nothing, offsets in request order, one segment and one
// log_txns row per partition, UUIDv7 message ids), except that a duplicate
// is not a verdict: a push whose transactionId is inside its partition's
// window, or repeats an earlier push of the same partition in this
// transaction (window > 0), aborts everything with a *queen.TxnConflict
// matching queen.ErrDuplicate. Acks are applied as Store.Ack applies them
// (an offset commit per consumer row), after the pushes, so an ack may name
// a message pushed earlier in the same transaction; an ack answered
// unresolvable or lease_invalid aborts everything (a *queen.TxnConflict
// matching queen.ErrUnresolvable or queen.ErrLeaseInvalid), as does a
// required lease that is not live when its consumer row is locked.
//
// Lock order (the global one, so concurrent transactions cannot deadlock):
// the row of every partition pushed to or acked in, in ascending id order,
// then every consumer row, in ascending (partition id, group) order. Acked
// partitions are locked too because a first ack of a group creates its
// consumer row, whose foreign key takes a lock on the partition row: taken
// out of order, that lock could deadlock two transactions. Partitions of the
// pushes are resolved (and created) before the transaction begins. A lock
// not granted within Config.LockTimeout rolls the whole transaction back
// with queen.ErrLockTimeout (503, retryable).
func (s *Store) Transaction(ctx context.Context, req *queen.TxnRequest) ([]queen.TxnOpResult, error) {
	res := make([]queen.TxnOpResult, len(req.Ops))

	// Pushes, by partition.
	type pkey struct{ queue, partition string }
	pidOf := map[pkey]uuid.UUID{}
	parts := map[uuid.UUID]*txnPartition{}
	var pushPIDs []uuid.UUID
	for i, op := range req.Ops {
		if op.Type != queen.TxnPush {
			continue
		}
		res[i].Push = make([]queen.Result, len(op.Items))
		for j := range op.Items {
			it := &op.Items[j]
			k := pkey{it.Queue, it.Partition}
			pid, ok := pidOf[k]
			if !ok {
				var err error
				if pid, err = s.EnsurePartition(ctx, it.Queue, it.Partition); err != nil {
					return nil, err
				}
				pidOf[k] = pid
			}
			p := parts[pid]
			if p == nil {
				p = &txnPartition{batch: PushBatch{PartitionID: pid, Watermark: -1}}
				parts[pid] = p
				pushPIDs = append(pushPIDs, pid)
			}
			p.batch.Items = append(p.batch.Items, it)
			p.refs = append(p.refs, txnRef{i, j})
		}
	}
	sortUUIDs(pushPIDs)
	for _, pid := range pushPIDs {
		p := parts[pid]
		p.batch.LeaderOf = rules.Leaders(p.batch.Items)
	}

	// Acks, by consumer row.
	var acks []queen.AckItem
	var ackOps []int
	byKey := map[ackKey][]int{}
	for i, op := range req.Ops {
		if op.Type != queen.TxnAck {
			continue
		}
		k := ackKey{op.Ack.PartitionID, op.Ack.ConsumerGroup}
		byKey[k] = append(byKey[k], len(acks))
		acks = append(acks, op.Ack)
		ackOps = append(ackOps, i)
	}
	ackOut := make([]queen.AckResult, len(acks))
	for n, a := range acks {
		ackOut[n] = queen.AckResult{Index: n, TransactionID: a.TransactionID, PartitionID: a.PartitionID.String()}
	}

	// The consumer rows of the required leases, found before the locks and
	// checked under them.
	leaseKeys := map[ackKey]bool{}
	if len(req.RequiredLeases) > 0 {
		rows, err := s.pool.Query(ctx, sqlTxnLeases, req.RequiredLeases)
		if err != nil {
			return nil, unavailable(err)
		}
		for rows.Next() {
			var k ackKey
			if err := rows.Scan(&k.pid, &k.group); err != nil {
				rows.Close()
				return nil, unavailable(err)
			}
			leaseKeys[k] = true
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, unavailable(err)
		}
	}

	// Every partition row to lock, then every consumer row, ascending.
	lockSet := map[uuid.UUID]bool{}
	for _, pid := range pushPIDs {
		lockSet[pid] = true
	}
	keys := make([]ackKey, 0, len(byKey)+len(leaseKeys))
	for k := range byKey {
		lockSet[k.pid] = true
		keys = append(keys, k)
	}
	for k := range leaseKeys {
		if _, ok := byKey[k]; !ok {
			keys = append(keys, k)
		}
	}
	lockPIDs := make([]uuid.UUID, 0, len(lockSet))
	for pid := range lockSet {
		lockPIDs = append(lockPIDs, pid)
	}
	sortUUIDs(lockPIDs)
	sort.Slice(keys, func(a, b int) bool {
		if c := bytes.Compare(keys[a].pid[:], keys[b].pid[:]); c != 0 {
			return c < 0
		}
		return keys[a].group < keys[b].group
	})

	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, unavailable(err)
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck // after Commit a no-op

	if len(lockPIDs) > 0 {
		if err := s.txnPush(ctx, tx, lockPIDs, pushPIDs, parts); err != nil {
			return nil, err
		}
	}
	for _, pid := range pushPIDs {
		p := parts[pid]
		for n, ref := range p.refs {
			res[ref.op].Push[ref.item] = p.out.Results[n]
		}
	}

	// Lock every consumer row in order (creating an acked group's row on
	// first use), then check the required leases before any ack moves a
	// cursor or releases a lease.
	states := make([]consumerState, len(keys))
	found := make([]bool, len(keys))
	if len(keys) > 0 {
		b := &pgx.Batch{}
		for n, k := range keys {
			if _, ok := byKey[k]; ok {
				lockConsumer(b, k.pid, k.group, false, false, nil, false, &states[n], &found[n])
				continue
			}
			st, f := &states[n], &found[n]
			b.Queue(sqlConsumeLock, k.pid, k.group).QueryRow(func(row pgx.Row) error {
				err := st.scan(row)
				if errors.Is(err, pgx.ErrNoRows) {
					return nil
				}
				*f = err == nil
				return err
			})
		}
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return nil, unavailable(err)
		}
	}
	for n, id := range req.RequiredLeases {
		live := false
		for m := range keys {
			if found[m] && states[m].live && states[m].leaseID.Valid && uuid.UUID(states[m].leaseID.Bytes) == id {
				live = true
				break
			}
		}
		if !live {
			return nil, &queen.TxnConflict{Kind: queen.TxnRequiredLease, Op: n, LeaseID: &id}
		}
	}
	for _, k := range keys {
		idx, ok := byKey[k]
		if !ok {
			continue
		}
		if err := ackOne(ctx, tx, k, acks, idx, ackOut, nil, false, nil); err != nil {
			return nil, err
		}
	}
	for n, r := range ackOut {
		if r.Result == queen.Unresolvable || r.Result == queen.LeaseInvalid {
			return nil, ackConflict(ackOps[n], acks[n], r)
		}
	}
	for n, r := range ackOut {
		r.Index = ackOps[n]
		res[ackOps[n]].Ack = r
	}

	if err := tx.Commit(ctx); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) {
			return nil, queen.ErrUnavailable.With("transaction failed: %v", err)
		}
		return nil, queen.ErrCommitUnknown.With("transaction commit outcome unknown: %v", err)
	}
	return res, nil
}

// txnPush locks lockPIDs (ascending) and writes the pushes of parts (keyed
// by the ascending pushPIDs): the window probe, verdicts under the locks (a
// duplicate aborts), one segment and one log_txns row per partition.
func (s *Store) txnPush(ctx context.Context, tx pgx.Tx, lockPIDs, pushPIDs []uuid.UUID, parts map[uuid.UUID]*txnPartition) error {
	ids := make([]pgtype.UUID, len(lockPIDs))
	for k, pid := range lockPIDs {
		ids[k] = pgUUID(pid)
	}
	var probePIDs, probeHashes []pgtype.UUID
	var probeLo, probeHi []int32
	var probeWMs, probeAssumed []int64
	for _, pid := range pushPIDs {
		b := &parts[pid].batch
		lo := len(probeHashes) + 1
		for j, it := range b.Items {
			if leaderOf(b, j) == j {
				probeHashes = append(probeHashes, pgUUID(it.Hash))
			}
		}
		probePIDs = append(probePIDs, pgUUID(pid))
		probeWMs = append(probeWMs, -1) // no cache: the whole window
		probeAssumed = append(probeAssumed, 0)
		probeLo = append(probeLo, int32(lo))
		probeHi = append(probeHi, int32(len(probeHashes)))
	}

	locked := make(map[[16]byte]lockedPartition, len(lockPIDs))
	hits := map[[16]byte]map[queen.Hash]hit{}
	var wait float64
	pb := &pgx.Batch{}
	pb.Queue(sqlBundleLock, ids).Query(scanLocked(locked, &wait))
	if len(pushPIDs) > 0 {
		// A transaction does not pass through the actors' caches: no
		// watermark, no suspects, every hash looked up in the whole window.
		pb.Queue(sqlProbePlanBegin)
		pb.Queue(sqlBundleProbe, probePIDs, probeHashes, probeWMs, probeLo, probeHi, make([]bool, len(probeHashes)), probeAssumed, unbounded(len(probeHashes), Span{}.pgSince()), unbounded(len(probeHashes), Span{}.pgUntil())).Query(scanProbe(locked, hits))
		pb.Queue(sqlProbePlanEnd)
	}
	start := time.Now()
	if err := tx.SendBatch(ctx, pb).Close(); err != nil {
		if lockTimedOut(err) {
			s.observe(LockEvent{Op: "transaction", Wait: time.Since(start), TimedOut: true})
		}
		return unavailable(err)
	}
	s.observe(LockEvent{Op: "transaction", Wait: seconds(wait)})

	// Verdicts under the locks: any duplicate aborts; the first one in
	// request order is named.
	var dup *queen.TxnConflict
	var dupRef txnRef
	for _, pid := range pushPIDs {
		p := parts[pid]
		lp, ok := locked[pid]
		if !ok || lp.window < 0 {
			return queen.ErrPartitionGone.With("transaction: partition %q of queue %q was deleted (its queue was deleted); retry", p.batch.Items[0].Partition, p.batch.Items[0].Queue)
		}
		p.out = PushOutcome{Results: make([]queen.Result, len(p.batch.Items)), LastOffset: -1, Window: lp.window, FullProbe: true}
		msgIDs, frames, hashes, keys, clean := s.assign(&p.batch, lp.window, lp.last, hits[pid], &p.out)
		if clean > 0 {
			p.seg = &txnSegment{msgIDs: msgIDs, frames: frames, hashes: hashes, keys: keys}
		}
		// refs are in request order: the partition's first duplicate is its
		// lowest.
		for n, r := range p.out.Results {
			if r.Verdict != queen.Duplicate {
				continue
			}
			if ref := p.refs[n]; dup == nil || ref.op < dupRef.op || (ref.op == dupRef.op && ref.item < dupRef.item) {
				dup, dupRef = dupConflict(p, n, lp.window), ref
			}
			break
		}
	}
	if dup != nil {
		return dup
	}

	var (
		segPIDs                      []pgtype.UUID
		segFirst, segLast            []int64
		segIDs, segFrames, segHashes [][]byte
		rowPIDs, rowHashes           []pgtype.UUID
		rowOffsets, rowSegments      []int64
		written                      []*txnPartition
	)
	for _, pid := range pushPIDs {
		p := parts[pid]
		sg := p.seg
		if sg == nil {
			continue
		}
		written = append(written, p)
		segPIDs = append(segPIDs, pgUUID(pid))
		segFirst = append(segFirst, p.out.FirstOffset)
		segLast = append(segLast, p.out.LastOffset)
		segIDs = append(segIDs, sg.msgIDs)
		segFrames = append(segFrames, sg.frames)
		segHashes = append(segHashes, sg.hashes)
		for j, k := range sg.keys {
			rowPIDs = append(rowPIDs, pgUUID(pid))
			rowHashes = append(rowHashes, pgUUID(k))
			rowOffsets = append(rowOffsets, p.out.FirstOffset+int64(j))
			rowSegments = append(rowSegments, p.out.FirstOffset)
		}
	}
	if len(written) == 0 {
		return nil
	}
	var created time.Time
	rows, err := tx.Query(ctx, sqlBundleInsert, segPIDs, segFirst, segLast, segIDs, segFrames, segHashes, rowPIDs, rowHashes, rowOffsets, rowSegments)
	if err != nil {
		return unavailable(err)
	}
	for rows.Next() {
		if err := rows.Scan(&created); err != nil {
			rows.Close()
			return unavailable(err)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return unavailable(err)
	}
	for _, p := range written {
		p.out.CreatedAt = created
	}
	return nil
}

// dupConflict is the conflict naming item n of p, a duplicate (SPEC.md §5).
func dupConflict(p *txnPartition, n int, window int64) *queen.TxnConflict {
	it, ref, r := p.batch.Items[n], p.refs[n], p.out.Results[n]
	c := &queen.TxnConflict{Kind: queen.TxnDuplicate, Op: ref.op, Item: ref.item, Queue: it.Queue, Partition: it.Partition,
		PartitionID: p.batch.PartitionID, TransactionID: it.TransactionID}
	if l := leaderOf(&p.batch, n); l != n {
		c.Kind, c.EarlierOp, c.EarlierItem = queen.TxnRepeat, p.refs[l].op, p.refs[l].item
	} else {
		c.Original, c.OriginalOffset, c.WindowSeconds = r.MessageID, r.Offset, window
	}
	return c
}

// ackConflict is the conflict naming ack operation op, answered r
// (unresolvable or lease_invalid).
func ackConflict(op int, a queen.AckItem, r queen.AckResult) *queen.TxnConflict {
	c := &queen.TxnConflict{Kind: queen.TxnUnresolvable, Op: op, PartitionID: a.PartitionID, TransactionID: a.TransactionID,
		ByOffset: a.Offset >= 0, Detail: r.Error, LeaseID: a.LeaseID}
	if r.Result == queen.LeaseInvalid {
		c.Kind = queen.TxnLeaseInvalid
	}
	return c
}

func sortUUIDs(ids []uuid.UUID) {
	sort.Slice(ids, func(a, b int) bool { return bytes.Compare(ids[a][:], ids[b][:]) < 0 })
}

// unbounded returns n copies of end, the probe's span bounds for hashes
// looked up in the whole window.
func unbounded(n int, end pgtype.Timestamptz) []pgtype.Timestamptz {
	out := make([]pgtype.Timestamptz, n)
	for i := range out {
		out[i] = end
	}
	return out
}
