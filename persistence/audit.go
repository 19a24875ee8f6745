package persistence

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
)

var (
	sqlAuditSegments   = q("audit_segments")
	sqlAuditPlanBegin  = q("audit_plan_begin")
	sqlAuditDurability = q("audit_durability")
	sqlAuditStats      = q("audit_stats")
)

// StoredMessage is one stored frame as the load-test audit sees it
// (SPEC.md §12): where it is, its offset and identity, and when its segment
// was committed.
type StoredMessage struct {
	Queue         string
	Partition     string
	PartitionID   uuid.UUID
	Offset        int64
	MessageID     uuid.UUID
	TransactionID string
	// CreatedAt is the created_at of the frame's segment (PostgreSQL's clock).
	CreatedAt time.Time
}

// Audit is a read-only view of the stored messages, for `queen loadtest`'s
// post-run audit. Its connections run with default_transaction_read_only=on,
// so it cannot write even by mistake. It is safe for concurrent use.
type Audit struct {
	pool *pgxpool.Pool
}

// OpenAudit connects a small read-only pool to url (a PostgreSQL URL or
// key=value connection string). It does not check the schema.
func OpenAudit(ctx context.Context, url string) (*Audit, error) {
	pool, err := openPool(ctx, url, 2, map[string]string{"default_transaction_read_only": "on"}, nil)
	if err != nil {
		return nil, err
	}
	return &Audit{pool: pool}, nil
}

// Close closes the pool.
func (a *Audit) Close() { a.pool.Close() }

// EachMessage calls fn for every stored frame of the named queues, segment by
// segment (a partition's segments together, in offset order; the partitions
// in no particular order), streaming: one segment is in memory at a time. The scan runs in one read-only REPEATABLE READ transaction, so it
// sees one snapshot. fn must not keep the *StoredMessage; an error from fn
// stops the scan and is returned. A segment whose bytes do not decode, or
// whose offset range does not match its frame count, is ErrCorruptSegment.
func (a *Audit) EachMessage(ctx context.Context, queues []string, fn func(*StoredMessage) error) error {
	return a.eachSegment(ctx, queues, nil, nil, nil, false, fn)
}

// eachFrame unpacks one segment [first, last] of m's partition and calls fn
// for each frame, m filled in.
func eachFrame(m *StoredMessage, first, last int64, ids, frames []byte, fn func(*StoredMessage) error) error {
	if len(ids) > 0 && (int64(len(ids)/16) != last-first+1 || len(ids)%16 != 0) {
		return fmt.Errorf("%w: queue %q partition %q segment [%d, %d] holds %d message ids", ErrCorruptSegment, m.Queue, m.Partition, first, last, len(ids)/16)
	}
	k := int64(0)
	err := walkFrames(SegmentIDs{Stored: ids, Partition: m.PartitionID, First: first, At: m.CreatedAt}, frames, func(v *frameView) error {
		if first+k > last {
			return fmt.Errorf("%w: queue %q partition %q segment [%d, %d] holds more frames", ErrCorruptSegment, m.Queue, m.Partition, first, last)
		}
		m.Offset = first + k
		k++
		m.MessageID = v.messageID
		m.TransactionID = string(v.txn)
		return fn(m)
	})
	if err == nil && first+k != last+1 {
		err = fmt.Errorf("%w: queue %q partition %q segment [%d, %d] holds %d frames", ErrCorruptSegment, m.Queue, m.Partition, first, last, k)
	}
	if errors.Is(err, ErrCorruptSegment) {
		return fmt.Errorf("%w: queue %q partition %q segment at offset %d", err, m.Queue, m.Partition, first)
	}
	return err
}

// EachMessageAfter calls fn for every stored frame of queue whose segment
// starts above the last offset already read in its partition: after[i] for
// the partition named names[i] (names and after have the same length; a
// partition not listed is read from offset 0), segment by segment (as
// EachMessage: a partition's together, in offset order), streaming, in one read-only REPEATABLE READ snapshot like
// EachMessage. Offsets are allocated and committed in order under the
// partition's row lock (SPEC.md §1), so a caller that moves a partition's
// bound to the last offset it saw reads every segment exactly once, as long
// as it reads again before retention deletes what is new (SPEC.md §7:
// retention deletes by age). A segment whose first offset is above bound+1
// means the offsets in between were deleted before they were read.
// since, when not nil (same length as names), is the CreatedAt of the
// segment holding each bound (as the StoredMessage of the bound's offset
// carried it; the zero time: unknown): a partition's segments are stamped
// in offset order (bundle_stamp), so those above the bound are searched
// only in the time ranges from there on; without it every range of the
// partition is descended (at 10,000 partitions and a 5-minute retention,
// 250,000-400,000 buffers a pass). A clock stepped back between two
// commits of a partition could hide the later one from a bound's read
// until the next read without since, which reports the offsets skipped.
// Every partition of the queue is looked at (a cost that grows with the
// partition count); EachMessageIn reads only the partitions listed.
// fn must not keep the *StoredMessage; an error from fn stops the scan and is
// returned. A segment that does not decode is ErrCorruptSegment.
func (a *Audit) EachMessageAfter(ctx context.Context, queue string, names []string, after []int64, since []time.Time, fn func(*StoredMessage) error) error {
	return a.eachSegment(ctx, []string{queue}, names, after, since, false, fn)
}

// EachMessageIn is EachMessageAfter over the partitions listed only (after[i]
// is -1 for a partition never read): its cost follows len(names), not the
// queue's partition count. A name the queue does not have is skipped.
func (a *Audit) EachMessageIn(ctx context.Context, queue string, names []string, after []int64, since []time.Time, fn func(*StoredMessage) error) error {
	if len(names) == 0 {
		return nil
	}
	return a.eachSegment(ctx, []string{queue}, names, after, since, true, fn)
}

// eachSegment runs audit_segments (the one statement of the three reads
// above) over queues in one read-only REPEATABLE READ snapshot, calling fn
// for every frame: names, after and since (nil: unknown) bound the
// partitions named (listed: read those only).
func (a *Audit) eachSegment(ctx context.Context, queues, names []string, after []int64, since []time.Time, listed bool, fn func(*StoredMessage) error) error {
	if len(names) != len(after) || (since != nil && len(since) != len(names)) {
		return fmt.Errorf("audit: %d partition names but %d offsets and %d times", len(names), len(after), len(since))
	}
	if names == nil {
		names, after = []string{}, []int64{}
	}
	at := make([]pgtype.Timestamptz, len(names))
	for i := range at {
		at[i] = pgtype.Timestamptz{InfinityModifier: pgtype.NegativeInfinity, Valid: true}
		if since != nil && !since[i].IsZero() {
			at[i] = pgtype.Timestamptz{Time: since[i], Valid: true}
		}
	}
	tx, err := a.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return unavailable(err)
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck // read-only
	if _, err := tx.Exec(ctx, sqlAuditPlanBegin); err != nil {
		return unavailable(err)
	}
	rows, err := tx.Query(ctx, sqlAuditSegments, queues, names, after, listed, at)
	if err != nil {
		return unavailable(err)
	}
	defer rows.Close()
	var m StoredMessage
	for rows.Next() {
		var first, last int64
		var ids, frames []byte
		if err := rows.Scan(&m.Queue, &m.Partition, &m.PartitionID, &first, &last, &m.CreatedAt, &ids, &frames); err != nil {
			return unavailable(err)
		}
		if err := eachFrame(&m, first, last, ids, frames, fn); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return unavailable(err)
	}
	return nil
}

// DBStats is the database's size figures at one moment, for the load test's
// timeline (bytes).
type DBStats struct {
	// DatabaseBytes is pg_database_size of the database.
	DatabaseBytes int64
	// SidecarBytes is pg_total_relation_size summed over
	// queen.log_txn_hashes, queen.hash_blocks and queen.hash_prints, every partition of a partitioned table included
	// (indexes and TOAST too).
	SidecarBytes int64
	// WALPosition is pg_current_wal_lsn() as text ("16/B374D848").
	WALPosition string
	// WALBytes is the WAL written since the position passed to Stats (0
	// when none was passed).
	WALBytes int64
}

// Stats reads the database's size figures and the WAL written since
// walSince (a WALPosition of an earlier call; "" for none). Read-only; one
// round trip.
func (a *Audit) Stats(ctx context.Context, walSince string) (DBStats, error) {
	return dbStats(ctx, a.pool, walSince)
}

// StorageStats is Audit.Stats for the broker's own storage gauges: WALBytes
// is the WAL position in bytes (the WAL written since the cluster began).
func (s *Store) StorageStats(ctx context.Context) (DBStats, error) {
	return dbStats(ctx, s.pool, "0/0")
}

func dbStats(ctx context.Context, db interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}, walSince string) (DBStats, error) {
	var since *string
	if walSince != "" {
		since = &walSince
	}
	var s DBStats
	if err := db.QueryRow(ctx, sqlAuditStats, since).Scan(&s.DatabaseBytes, &s.SidecarBytes, &s.WALPosition, &s.WALBytes); err != nil {
		return s, unavailable(err)
	}
	return s, nil
}

// Durability is the database's commit durability settings, as its
// sessions see them ("on"/"off", synchronous_commit also
// "remote_apply"/"remote_write"/"local"). Whether they make a commit
// durable is the load harness's rule (loadtest/report.Durability.Durable).
type Durability struct {
	Fsync             string `json:"fsync"`
	SynchronousCommit string `json:"synchronous_commit"`
	FullPageWrites    string `json:"full_page_writes"`
}

// Durability reads the durability settings of the audited database.
func (a *Audit) Durability(ctx context.Context) (Durability, error) {
	var d Durability
	if err := a.pool.QueryRow(ctx, sqlAuditDurability).Scan(&d.Fsync, &d.SynchronousCommit, &d.FullPageWrites); err != nil {
		return d, unavailable(err)
	}
	return d, nil
}

// Messages returns every stored frame of the named queues (see EachMessage),
// collected in a slice. For large queues prefer EachMessage.
func (a *Audit) Messages(ctx context.Context, queues []string) ([]StoredMessage, error) {
	var out []StoredMessage
	err := a.EachMessage(ctx, queues, func(m *StoredMessage) error {
		out = append(out, *m)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

var (
	sqlAuditCursors     = q("audit_cursors")
	sqlAuditDrain       = q("audit_drain")
	sqlAuditDeadLetters = q("audit_dead_letters")
)

// Cursor is one consumer group's committed position in one partition.
type Cursor struct {
	Queue, Partition string
	PartitionID      uuid.UUID
	ConsumerGroup    string
	// Cursor is the last committed offset (-1: nothing committed).
	Cursor int64
	// LastOffset is the partition's last allocated offset.
	LastOffset int64
}

// Cursors returns every consumer group's cursor in the named queues.
func (a *Audit) Cursors(ctx context.Context, queues []string) ([]Cursor, error) {
	rows, err := a.pool.Query(ctx, sqlAuditCursors, queues)
	if err != nil {
		return nil, unavailable(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Cursor, error) {
		var c Cursor
		err := r.Scan(&c.Queue, &c.Partition, &c.PartitionID, &c.ConsumerGroup, &c.Cursor, &c.LastOffset)
		return c, err
	})
	if err != nil {
		return nil, unavailable(err)
	}
	return out, nil
}

// DrainState is one look at how far consumer groups are from the end of a
// queue's partitions (Audit.Drain).
type DrainState struct {
	// Behind counts the (group, partition) pairs whose partition holds a
	// message and whose group has no consumer row there or a cursor short
	// of the partition's last offset.
	Behind int64
	// Sum is the sum over the pairs' consumer rows of cursor + 1: it grows
	// as long as anything is consumed.
	Sum int64
	// Group and Partition name one pair behind ("" when none is); Cursor
	// is its cursor (nil: no consumer row) and LastOffset its partition's
	// last allocated offset.
	Group, Partition string
	Cursor           *int64
	LastOffset       int64
}

// Drain returns how far groups are from the end of the partitions parts
// (by name) of queue, in one aggregate statement: the cheap poll of a load
// test's drain, where Cursors reads every consumer row.
func (a *Audit) Drain(ctx context.Context, queue string, groups, parts []string) (DrainState, error) {
	var d DrainState
	var group, part *string
	var last *int64
	err := a.pool.QueryRow(ctx, sqlAuditDrain, queue, groups, parts).Scan(&d.Behind, &d.Sum, &group, &part, &d.Cursor, &last)
	if err != nil {
		return DrainState{}, unavailable(err)
	}
	if group != nil && part != nil && last != nil {
		d.Group, d.Partition, d.LastOffset = *group, *part, *last
	}
	return d, nil
}

// StoredDeadLetter is one dead letter as the audit sees it.
type StoredDeadLetter struct {
	Queue, Partition string
	PartitionID      uuid.UUID
	ConsumerGroup    string
	Offset           int64
	MessageID        uuid.UUID
	TransactionID    string
	Error            string
	Attempts         int
}

// DeadLetters returns every dead letter of the named queues, oldest first.
func (a *Audit) DeadLetters(ctx context.Context, queues []string) ([]StoredDeadLetter, error) {
	rows, err := a.pool.Query(ctx, sqlAuditDeadLetters, queues)
	if err != nil {
		return nil, unavailable(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (StoredDeadLetter, error) {
		var d StoredDeadLetter
		var part *string
		var frame []byte
		if err := r.Scan(&d.Queue, &part, &d.PartitionID, &d.ConsumerGroup, &d.Offset, &d.MessageID, &frame, &d.Error, &d.Attempts); err != nil {
			return d, err
		}
		if part != nil {
			d.Partition = *part
		}
		fs, err := UnpackFrames(StoredIDs(d.MessageID[:]), frame)
		if err != nil || len(fs) != 1 {
			return d, fmt.Errorf("%w: dead letter of queue %q at offset %d", ErrCorruptSegment, d.Queue, d.Offset)
		}
		d.TransactionID = fs[0].TransactionID
		return d, nil
	})
	if err != nil {
		return nil, unavailable(err)
	}
	return out, nil
}
