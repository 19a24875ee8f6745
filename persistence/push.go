package persistence

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	queen "github.com/queen-mq/queen-go"
)

// PushBatch is one partition's share of a commit: the items of one or more
// fused push requests, in mailbox arrival order (SPEC.md §1).
type PushBatch struct {
	PartitionID uuid.UUID
	Items       []*queen.Item
	// LeaderOf[i] is i for an item whose hash does not occur earlier in Items
	// (a leader), else the index of the leader with the same hash (a follower,
	// SPEC.md §3). It is applied only when the window is > 0. nil means every
	// item is a leader.
	LeaderOf []int32
	// Watermark: none of the leaders' hashes occur at or below this offset
	// (SPEC.md §8); -1 probes the whole window.
	Watermark int64
	// NoDedupHint: the caller last saw this partition's window at 0, so try the
	// single UPDATE ... RETURNING path first. A wrong hint costs one round trip,
	// never a verdict: that path writes nothing unless the window is 0.
	NoDedupHint bool
}

// PushOutcome is the result of Commit: one queen.Result per item, in order.
type PushOutcome struct {
	Results []queen.Result
	// Window is the dedup window read under the row lock, in seconds.
	Window int64
	// FirstOffset and LastOffset span the new segment; LastOffset < FirstOffset
	// when nothing was written.
	FirstOffset, LastOffset int64
	// CreatedAt is the segment's created_at (zero when nothing was written).
	CreatedAt time.Time
	// FullProbe reports that the probe covered the whole window (watermark -1).
	FullProbe bool
}

// Commit runs the push transaction of SPEC.md §3 for one partition: row lock,
// window probe above the watermark, offsets for the clean items only, one
// segment and one log_txns row, commit. A duplicate writes nothing.
//
// On error every item is answered queen.Failed: queen.ErrUnavailable when the
// transaction certainly did not commit, queen.ErrCommitUnknown when the commit
// was sent but its outcome was lost.
func (s *Store) Commit(ctx context.Context, b *PushBatch) (PushOutcome, error) {
	out, err := s.commit(ctx, b)
	if err != nil {
		qe := queen.AsError(unavailable(err))
		out.Results = make([]queen.Result, len(b.Items))
		for i := range out.Results {
			out.Results[i] = queen.Result{Verdict: queen.Failed, PartitionID: b.PartitionID, Offset: -1, Err: qe}
		}
		out.FirstOffset, out.LastOffset = 0, -1
		return out, qe
	}
	return out, nil
}

func (s *Store) commit(ctx context.Context, b *PushBatch) (PushOutcome, error) {
	out := PushOutcome{Results: make([]queen.Result, len(b.Items)), LastOffset: -1}
	n := len(b.Items)
	if n == 0 {
		return out, nil
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return out, err
	}
	defer conn.Release()

	if b.NoDedupHint {
		ok, err := s.commitNoDedup(ctx, conn, b, &out)
		if err != nil || ok {
			return out, err
		}
	}

	var last, window int64
	hits := map[queen.Hash]hit{}
	leaders := distinctLeaders(b)
	pb := &pgx.Batch{}
	pb.Queue("BEGIN")
	pb.Queue(sqlPushLock, b.PartitionID).QueryRow(func(r pgx.Row) error { return r.Scan(&last, &window) })
	pb.Queue(sqlPushProbe, b.PartitionID, leaders, b.Watermark).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var k [16]byte
			var off int64
			var mid []byte
			if err := rows.Scan(&k, &off, &mid); err != nil {
				return err
			}
			if old, ok := hits[k]; ok && old.offset < off {
				continue // the lowest offset is the original
			}
			var id uuid.UUID
			if len(mid) == 16 {
				copy(id[:], mid)
			}
			hits[k] = hit{offset: off, id: id}
		}
		return rows.Err()
	})
	if err := conn.SendBatch(ctx, pb).Close(); err != nil {
		rollback(conn)
		return out, err
	}
	out.Window = window
	out.FullProbe = b.Watermark < 0

	msgIDs, frames, hashes, keys, clean := s.assign(b, window, last, hits, &out)
	if clean == 0 {
		// Every item is a duplicate: nothing to write, nothing to undo.
		_, err := conn.Exec(ctx, "COMMIT")
		if err != nil {
			// Nothing was written, so the verdicts stand whatever happened.
			conn.Conn().Close(context.Background()) //nolint:errcheck
		}
		return out, nil
	}
	var created time.Time
	ib := &pgx.Batch{}
	ib.Queue(sqlPushInsert, b.PartitionID, out.FirstOffset, out.LastOffset, msgIDs, frames, hashes, keys).QueryRow(func(r pgx.Row) error { return r.Scan(&created) })
	ib.Queue("COMMIT")
	if err := conn.SendBatch(ctx, ib).Close(); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) {
			// The server refused a statement: the transaction did not commit.
			rollback(conn)
			return out, queen.ErrUnavailable.With("push failed: %v", err)
		}
		conn.Conn().Close(context.Background()) //nolint:errcheck
		return out, queen.ErrCommitUnknown.With("push commit outcome unknown: %v", err)
	}
	out.CreatedAt = created
	return out, nil
}

// commitNoDedup tries the window-0 single statement; ok=false means the window
// is not 0 (nothing was written) and the caller takes the probing path.
func (s *Store) commitNoDedup(ctx context.Context, conn *pgxpool.Conn, b *PushBatch, out *PushOutcome) (bool, error) {
	n := len(b.Items)
	msgIDs, frames, hashes, keys := make([]byte, 0, 16*n), make([]byte, 0, 64*n), make([]byte, 0, 16*n), make([][16]byte, n)
	ids := make([]uuid.UUID, n)
	for i, it := range b.Items {
		ids[i] = newMessageID()
		msgIDs = append(msgIDs, ids[i][:]...)
		frames = AppendFrame(frames, it.TransactionID, it.TraceID, it.Payload)
		hashes = append(hashes, it.Hash[:]...)
		keys[i] = it.Hash
	}
	var first int64
	var created time.Time
	err := conn.QueryRow(ctx, sqlPushNoDedup, b.PartitionID, int64(n), msgIDs, frames, hashes, keys).Scan(&first, &created)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) {
			return false, err
		}
		conn.Conn().Close(context.Background()) //nolint:errcheck
		return false, queen.ErrCommitUnknown.With("push commit outcome unknown: %v", err)
	}
	out.Window, out.FirstOffset, out.LastOffset, out.CreatedAt = 0, first, first+int64(n)-1, created
	for i := range b.Items {
		out.Results[i] = queen.Result{Verdict: queen.Queued, MessageID: ids[i], PartitionID: b.PartitionID, Offset: first + int64(i)}
	}
	return true, nil
}

type hit struct {
	offset int64
	id     uuid.UUID
}

// assign gives verdicts under the lock: leaders found by the probe are
// duplicates of the original; clean leaders get consecutive offsets after
// last in item order; followers echo their leader. With window 0 every item
// is clean (SPEC.md §3).
func (s *Store) assign(b *PushBatch, window, last int64, hits map[queen.Hash]hit, out *PushOutcome) (msgIDs, frames, hashes []byte, keys [][16]byte, clean int) {
	n := len(b.Items)
	msgIDs = make([]byte, 0, 16*n)
	frames = make([]byte, 0, 64*n)
	hashes = make([]byte, 0, 16*n)
	keys = make([][16]byte, 0, n)
	next := last + 1
	out.FirstOffset = next
	for i, it := range b.Items {
		r := &out.Results[i]
		r.PartitionID = b.PartitionID
		if window > 0 {
			if l := leaderOf(b, i); l != i {
				lr := out.Results[l]
				*r = queen.Result{Verdict: queen.Duplicate, MessageID: lr.MessageID, PartitionID: b.PartitionID, Offset: lr.Offset}
				continue
			}
			if h, ok := hits[it.Hash]; ok {
				*r = queen.Result{Verdict: queen.Duplicate, MessageID: h.id, PartitionID: b.PartitionID, Offset: h.offset}
				continue
			}
		}
		id := newMessageID()
		*r = queen.Result{Verdict: queen.Queued, MessageID: id, PartitionID: b.PartitionID, Offset: next}
		next++
		clean++
		msgIDs = append(msgIDs, id[:]...)
		frames = AppendFrame(frames, it.TransactionID, it.TraceID, it.Payload)
		hashes = append(hashes, it.Hash[:]...)
		keys = append(keys, it.Hash)
	}
	out.LastOffset = next - 1
	return msgIDs, frames, hashes, keys, clean
}

func leaderOf(b *PushBatch, i int) int {
	if b.LeaderOf == nil {
		return i
	}
	return int(b.LeaderOf[i])
}

// distinctLeaders returns the hashes to probe: one per leader.
func distinctLeaders(b *PushBatch) [][16]byte {
	out := make([][16]byte, 0, len(b.Items))
	for i, it := range b.Items {
		if leaderOf(b, i) == i {
			out = append(out, it.Hash)
		}
	}
	return out
}

func rollback(conn *pgxpool.Conn) {
	if _, err := conn.Exec(context.Background(), "ROLLBACK"); err != nil {
		conn.Conn().Close(context.Background()) //nolint:errcheck
	}
}

// newMessageID returns a UUIDv7 (SPEC.md §2).
func newMessageID() uuid.UUID {
	id, err := uuid.NewV7()
	if err != nil {
		return uuid.New()
	}
	return id
}
