package persistence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/rules"
)

// consumerState is a locked consumer row with what the consume paths need.
type consumerState struct {
	cursor       int64
	leaseID      pgtype.UUID
	live         bool
	leaseTo      *int64
	failCounts   map[int64]int32
	lastOffset   int64
	partition    string
	queue        string
	leaseTime    int64
	retryLimit   int64
	delayed      int64
	windowBuffer int64
	now          time.Time
	lockWait     float64 // seconds, read by ack_lock only
	// bisect is the row's poison isolation (SPEC.md §4); expireLease and
	// the pop change it, every write of the row stores it.
	bisect rules.Bisection
	// leases is what this transaction settled of expired leases and
	// bisections, counted in the Store's queen.LeaseStats once it commits.
	leases queen.LeaseStats
}

func (c *consumerState) scan(row pgx.Row) error { return c.scanRow(row, false) }

// scanRow reads consume_lock's columns, and with wait ack_lock's lock wait.
func (c *consumerState) scanRow(row pgx.Row, wait bool) error { return c.scanAfter(row, nil, wait) }

// scanAfter reads the columns pre (a many statement's position column),
// then consume_lock's, and with wait ack_lock's lock wait.
func (c *consumerState) scanAfter(row pgx.Row, pre []any, wait bool) error {
	var counts, bisect []byte
	dst := append(pre, &c.cursor, &c.leaseID, &c.live, &c.leaseTo, &counts,
		&c.lastOffset, &c.partition, &c.queue, &c.leaseTime, &c.retryLimit, &c.delayed, &c.windowBuffer, &c.now, &bisect)
	if wait {
		dst = append(dst, &c.lockWait)
	}
	if err := row.Scan(dst...); err != nil {
		return err
	}
	var m map[string]int32
	if err := json.Unmarshal(counts, &m); err != nil {
		return fmt.Errorf("persistence: consumer fail_counts: %w", err)
	}
	c.failCounts = make(map[int64]int32, len(m))
	for k, v := range m {
		off, err := strconv.ParseInt(k, 10, 64)
		if err != nil {
			return fmt.Errorf("persistence: consumer fail_counts key %q: %w", k, err)
		}
		c.failCounts[off] = v
	}
	return decodeBisection(bisect, &c.bisect)
}

// storedBisection is rules.Bisection as the consumer row's bisect column
// stores it (a JSON object; the column is NULL when no bisection is active).
type storedBisection struct {
	To    int64     `json:"to"`
	Hot   int64     `json:"hot"`
	Size  int64     `json:"size"`
	Cap   int64     `json:"cap"`
	Mark  int64     `json:"mark"`
	Since time.Time `json:"since"`
}

// decodeBisection reads the bisect column (nil: none) into b.
func decodeBisection(col []byte, b *rules.Bisection) error {
	*b = rules.Bisection{}
	if col == nil {
		return nil
	}
	var sb storedBisection
	if err := json.Unmarshal(col, &sb); err != nil {
		return fmt.Errorf("persistence: consumer bisect: %w", err)
	}
	*b = rules.Bisection{Active: true, To: sb.To, Hot: sb.Hot, Size: sb.Size, Cap: sb.Cap, Mark: sb.Mark, Since: sb.Since}
	return nil
}

// encodeBisection writes b as the bisect column: nil (SQL NULL) when it is
// not active.
func encodeBisection(b rules.Bisection) ([]byte, error) {
	if !b.Active {
		return nil, nil
	}
	return json.Marshal(storedBisection{To: b.To, Hot: b.Hot, Size: b.Size, Cap: b.Cap, Mark: b.Mark, Since: b.Since})
}

// rowState encodes the failure counts and the bisection of st for
// consume_update ($7, $8).
func rowState(st *consumerState) (counts, bisect []byte, err error) {
	if counts, err = encodeCounts(st.failCounts); err != nil {
		return nil, nil, err
	}
	bisect, err = encodeBisection(st.bisect)
	return counts, bisect, err
}

// encodeCounts writes failure counts as the fail_counts jsonb object.
func encodeCounts(counts map[int64]int32) ([]byte, error) {
	m := make(map[string]int32, len(counts))
	for off, n := range counts {
		m[strconv.FormatInt(off, 10)] = n
	}
	return json.Marshal(m)
}

// lockConsumer queues, on b, the statements that create (partition, group)'s
// consumer row on first use and lock it; *found reports whether the lock
// statement returned the row.
func lockConsumer(b *pgx.Batch, pid uuid.UUID, group string, skipLocked, subscribe bool, from *time.Time, isNew bool, st *consumerState, found *bool) {
	ensureConsumer(b, pid, group, subscribe, from, isNew)
	lockOnly(b, pid, group, skipLocked, st, found)
}

// ensureConsumer queues the statement that creates (partition, group)'s
// consumer row on first use. Creating one takes a key-share lock on the
// partition row (the foreign key), so a call that creates several does it
// for all of them, in ascending order, before it locks any consumer row.
func ensureConsumer(b *pgx.Batch, pid uuid.UUID, group string, subscribe bool, from *time.Time, isNew bool) {
	b.Queue(sqlConsumeEnsure, pid, group, from, isNew, subscribe)
}

// lockOnly queues the consumer row lock (see lockConsumer): consume_lock,
// or with skipLocked consume_lock_skip, which finds no row when another
// request holds it.
func lockOnly(b *pgx.Batch, pid uuid.UUID, group string, skipLocked bool, st *consumerState, found *bool) {
	lock := sqlConsumeLock
	if skipLocked {
		lock = sqlConsumeLockSkip
	}
	b.Queue(lock, pid, group).QueryRow(func(row pgx.Row) error {
		err := st.scan(row)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		*found = err == nil
		return err
	})
}

// lockMany queues the lock of the consumer rows of pids (distinct) for
// group in one statement (consume_lock_many, or with skipLocked
// consume_lock_many_skip, which finds no row another request holds): the
// rows are locked in ascending partition id whatever pids' order; sts[i]
// and found[i] receive pids[i]'s row (found false: no row, or skipped).
func lockMany(b *pgx.Batch, pids []uuid.UUID, group string, skipLocked bool, sts []consumerState, found []bool) {
	lock := sqlConsumeLockMany
	if skipLocked {
		lock = sqlConsumeLockManySk
	}
	b.Queue(lock, pids, group).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var i int64
			var st consumerState
			if err := st.scanAfter(rows, []any{&i}, false); err != nil {
				return err
			}
			if i < 1 || i > int64(len(pids)) || found[i-1] {
				return fmt.Errorf("persistence: consume_lock_many returned position %d of %d", i, len(pids))
			}
			sts[i-1], found[i-1] = st, true
		}
		return rows.Err()
	})
}

// Subscribe records group's subscription of queue at its first pop (SPEC.md
// §4): from, or now when isNew, or from the oldest message. It is a no-op
// once the group is subscribed. exists is false when the queue does not
// exist (nothing is recorded).
func (s *Store) Subscribe(ctx context.Context, queueName, group string, from *time.Time, isNew bool) (exists bool, err error) {
	var tag pgconn.CommandTag
	err = s.retryBroken(ctx, func() (err error) {
		tag, err = s.pool.Exec(ctx, sqlConsumeSubscribe, queueName, group, from, isNew)
		return err
	})
	if err != nil {
		return false, unavailable(err)
	}
	if tag.RowsAffected() == 1 {
		return true, nil
	}
	// Already subscribed, or no such queue.
	if _, err := s.Queue(ctx, queueName); err != nil {
		if errors.Is(err, queen.ErrNotFound) {
			return false, nil
		}
		return false, err
	}
	return true, nil
}

// PartitionID returns the id of partition (queue, name), or uuid.Nil when it
// does not exist (pops never create partitions).
func (s *Store) PartitionID(ctx context.Context, queueName, partition string) (uuid.UUID, error) {
	var id uuid.UUID
	err := s.retryBroken(ctx, func() error {
		return s.pool.QueryRow(ctx, sqlGetPartition, queueName, partition).Scan(&id)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return uuid.Nil, nil
	}
	return id, unavailable(err)
}

// Candidates returns up to limit partitions of queue that may hold messages
// group can take now (allocator above the cursor, no live lease): the
// correction for a wildcard pop's in-memory hint.
func (s *Store) Candidates(ctx context.Context, queueName, group string, limit int) ([]uuid.UUID, error) {
	var ids []uuid.UUID
	err := s.retryBroken(ctx, func() error {
		rows, err := s.pool.Query(ctx, sqlConsumeCandidates, queueName, group, limit)
		if err != nil {
			return err
		}
		ids, err = pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
		return err
	})
	return ids, unavailable(err)
}

// ExtendLease extends live lease id to at least seconds from now (<= 0: the
// queue's leaseTime; capped at the greater of the queue's leaseTime and
// queen.MaxLeaseExtendSeconds) and returns its expiry (the earliest of the
// consumer rows still held under it, for a multi-partition pop's lease); it
// never shortens a lease. A lease that is not live (expired, released,
// unknown) is queen.ErrLeaseInvalid (SPEC.md §4). Any broker of a cluster
// can extend any lease: the rows are found through the lease's row of
// queen.consumer_leases (migration 0014), which the pop wrote, then by
// primary key; the statement is planned for its arguments on every call
// (pgx.QueryExecModeExec), never with a generic plan cached while the
// tables were small.
func (s *Store) ExtendLease(ctx context.Context, id uuid.UUID, seconds int64) (time.Time, error) {
	var t time.Time
	err := s.retryBroken(ctx, func() error {
		return s.pool.QueryRow(ctx, sqlConsumeExtend, pgx.QueryExecModeExec, id, seconds, int64(queen.MaxLeaseExtendSeconds)).Scan(&t)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return t, queen.ErrLeaseInvalid.With("lease %s is not live (expired, released or unknown)", id)
	}
	return t, unavailable(err)
}
