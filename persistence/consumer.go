package persistence

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
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
	lockWait     float64 // seconds this row's lock waited (consumer_lock)
	// num is the partition's number (queen.partitions.num, the segments'
	// key) and since the time of the cursor's segment (-infinity when not
	// recorded): a pop passes both to consume_segments_many.
	num   int64
	since pgtype.Timestamptz
	// bisect is the row's poison isolation (SPEC.md §4); expireLease and
	// the pop change it, every write of the row stores it.
	bisect rules.Bisection
	// leases is what this transaction settled of expired leases and
	// bisections, counted in the Store's queen.LeaseStats once it commits.
	leases queen.LeaseStats
}

// scan reads one consumer_lock row: its position (into *i), then the
// consumer row's state and the lock's wait.
func (c *consumerState) scan(row pgx.Row, i *int64) error {
	var counts, bisect []byte
	if err := row.Scan(i, &c.cursor, &c.leaseID, &c.live, &c.leaseTo, &counts, &c.lastOffset, &c.partition,
		&c.queue, &c.leaseTime, &c.retryLimit, &c.delayed, &c.windowBuffer, &c.now, &bisect, &c.num, &c.since, &c.lockWait); err != nil {
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
// consume_update_many ($7, $8).
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

// ensureConsumer queues the statement that creates (partition, group)'s
// consumer row on first use. Creating one takes a key-share lock on the
// partition row (the foreign key), so a call that creates several does it
// for all of them, in ascending order, before it locks any consumer row.
func ensureConsumer(b *pgx.Batch, pid uuid.UUID, group string, subscribe bool, from *time.Time, isNew bool) {
	b.Queue(sqlConsumeEnsure, pid, group, from, isNew, subscribe)
}

// lockRows queues on b the lock of the consumer rows keys, in keys' order
// (the caller's lock order: ascending partition id, then group), in one
// consumer_lock statement, or with skip its SKIP LOCKED form, which returns
// no row another request holds. Each row found is passed to got with its
// index in keys; a row that does not exist (or was skipped) is not.
func lockRows(b *pgx.Batch, keys []ackKey, skip bool, got func(k int, st *consumerState)) {
	pids := make([]uuid.UUID, len(keys))
	groups := make([]string, len(keys))
	for k, key := range keys {
		pids[k], groups[k] = key.pid, key.group
	}
	lock := sqlConsumerLock
	if skip {
		lock = sqlConsumerLockSkip
	}
	seen := make([]bool, len(keys))
	b.Queue(lock, pids, groups).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var i int64
			var st consumerState
			if err := st.scan(rows, &i); err != nil {
				return err
			}
			if i < 1 || i > int64(len(keys)) || seen[i-1] {
				return fmt.Errorf("persistence: consumer_lock returned position %d of %d", i, len(keys))
			}
			seen[i-1] = true
			got(int(i-1), &st)
		}
		return rows.Err()
	})
}

// lockMany queues the lock of the consumer rows of pids (distinct) for
// group (lockRows): the rows are locked in ascending partition id whatever
// pids' order; sts[i] and found[i] receive pids[i]'s row (found false: no
// row, or skipped).
func lockMany(b *pgx.Batch, pids []uuid.UUID, group string, skip bool, sts []consumerState, found []bool) {
	order := make([]int, len(pids))
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(x, y int) bool { return bytes.Compare(pids[order[x]][:], pids[order[y]][:]) < 0 })
	keys := make([]ackKey, len(pids))
	for k, i := range order {
		keys[k] = ackKey{pids[i], group}
	}
	lockRows(b, keys, skip, func(k int, st *consumerState) {
		sts[order[k]], found[order[k]] = *st, true
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

// rowWrites gathers writes of consumer rows of one group, each as
// one consume_update_many statement writes them.
type rowWrites struct {
	pids    []uuid.UUID
	cursors []int64
	leases  []pgtype.UUID
	secs    []*float64
	leaseTo []*int64
	counts  [][]byte
	bisects [][]byte
}

// add gathers the write of pid's row: consume_update_many's $3..$8 (lease
// uuid.Nil releases the lease; secs nil keeps the expiry).
func (w *rowWrites) add(pid uuid.UUID, cursor int64, lease uuid.UUID, secs *float64, leaseTo *int64, counts, bisect []byte) {
	w.pids = append(w.pids, pid)
	w.cursors = append(w.cursors, cursor)
	w.leases = append(w.leases, pgtype.UUID{Bytes: lease, Valid: lease != uuid.Nil})
	w.secs = append(w.secs, secs)
	w.leaseTo = append(w.leaseTo, leaseTo)
	w.counts = append(w.counts, counts)
	w.bisects = append(w.bisects, bisect)
}

// queue queues the gathered writes on b as one consume_update_many (none
// when nothing was gathered); expires, when not nil, receives the earliest
// lease expiry written (nil when no row holds a lease).
func (w *rowWrites) queue(b *pgx.Batch, group string, expires **time.Time) {
	if len(w.pids) == 0 {
		return
	}
	b.Queue(sqlConsumeUpdateMany, w.pids, group, w.cursors, w.leases, w.secs, w.leaseTo, w.counts, w.bisects).Query(func(rows pgx.Rows) error {
		n := 0
		for rows.Next() {
			var i int64
			var at *time.Time
			if err := rows.Scan(&i, &at); err != nil {
				return err
			}
			n++
			if expires != nil && at != nil && (*expires == nil || at.Before(**expires)) {
				*expires = at
			}
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if n != len(w.pids) {
			return fmt.Errorf("persistence: consume_update_many wrote %d of %d consumer rows", n, len(w.pids))
		}
		return nil
	})
}

// groupWrites gathers consumer row writes per consumer group (an ack's
// rows may belong to several), each group's for one consume_update_many.
type groupWrites struct {
	groups []string
	by     map[string]*rowWrites
}

// add gathers the write of (pid, group)'s row (see rowWrites.add).
func (g *groupWrites) add(group string, pid uuid.UUID, cursor int64, lease uuid.UUID, secs *float64, leaseTo *int64, counts, bisect []byte) {
	if g.by == nil {
		g.by = map[string]*rowWrites{}
	}
	w := g.by[group]
	if w == nil {
		w = &rowWrites{}
		g.by[group] = w
		g.groups = append(g.groups, group)
	}
	w.add(pid, cursor, lease, secs, leaseTo, counts, bisect)
}

// queue queues one consume_update_many per group gathered on b.
func (g *groupWrites) queue(b *pgx.Batch) {
	for _, group := range g.groups {
		g.by[group].queue(b, group, nil)
	}
}
