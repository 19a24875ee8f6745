package persistence

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/queen-mq/queen-go/lifecycle"
)

// Retention (SPEC.md §6, §7): one broker at a time deletes segments older
// than their queue's retentionSeconds, segments older than
// completedRetentionSeconds that every consumer group has committed past,
// never one whose hash sidecar range is not compacted yet (migration 0017:
// a crash rebuilds level 0 from the segments' hashes). Every such statement
// deletes a bounded batch and commits on its own; none locks a partition
// row, so pushes never wait for retention. The sidecar's entries are
// self-contained and go by whole time ranges (ranges.go) once older than
// GREATEST(dedupWindowSeconds, completedRetentionSeconds, the floor) of
// every queue, and by bounded deletes of such rows in level 0 (the
// DEFAULT partition, or a range not compacted in time). The lease rows of consumer_leases (migration 0014) go once
// expired, in bounded deletes.

var (
	sqlRetentionExpired   = withFloor(q("retention_expired"))
	sqlRetentionCompleted = withFloor(q("retention_completed"))
	sqlRetentionSidecar   = q("retention_sidecar")
	sqlRetentionLock      = q("retention_lock")
	sqlRetentionUnlock    = q("retention_unlock")
	sqlRetentionLeases    = q("retention_leases")
)

// Retention defaults.
const (
	// DefaultRetentionInterval is the pause between two passes (QUEEN_RETENTION_INTERVAL).
	DefaultRetentionInterval = 5 * time.Second
	// DefaultRetentionBatch bounds one statement (QUEEN_RETENTION_BATCH).
	DefaultRetentionBatch = 1000
	// DefaultTxnsFloor is the least age of an expired sidecar entry: acks by
	// transactionId resolve through the sidecar for at least this long
	// whatever a queue's window (SPEC.md §7).
	DefaultTxnsFloor = 900 * time.Second
)

// retentionStatementTimeout bounds one retention statement run by the loop
// (each deletes at most a batch, normally in milliseconds).
const retentionStatementTimeout = 30 * time.Second

// retentionStepBudget bounds the time one step of a pass spends starting
// statements, so a pass over a large backlog of row-by-row deletes ends and
// the loop's tick keeps making the segment and sidecar ranges ahead.
const retentionStepBudget = 10 * time.Second

// retentionMaxStatements bounds the statements of one step in one pass, so
// a pass over a very large backlog ends and the next pass goes on with it.
const retentionMaxStatements = 10000

// RetentionConfig configures retention passes and the loop.
type RetentionConfig struct {
	// Interval is the pause between the end of one pass and the start of the
	// next; 0 (or less) takes the default, 5 s (DefaultRetentionInterval).
	Interval time.Duration
	// Batch bounds each statement: at most Batch segments (or
	// expired level-0 rows of the sidecar, or expired lease rows of
	// consumer_leases), and, for segments, no
	// further segment once those taken hold Batch messages (a segment is
	// never split, so a single segment of more messages goes whole).
	// 0 (or less) takes the default, 1000 (DefaultRetentionBatch).
	Batch int
	// TxnsFloor is the least age of an expired sidecar entry; default and
	// production value 900 s (DefaultTxnsFloor). Only tests lower it
	// (QUEEN_TEST_TXNS_FLOOR); nothing in production sets it.
	TxnsFloor time.Duration
	// NoRangeGrace (tests only) makes the walk delete the segments of
	// segments_timed as soon as they are past their queue's retention, as
	// it does the others, instead of leaving them a range span and a pass
	// for their range's drop: a model that expects an exact cutoff at each
	// step holds. Nothing in production sets it.
	NoRangeGrace bool
	// CompactGrace (tests only) is how long after its upper bound a level-0
	// sidecar range is compacted; 0 (or less) takes the production value,
	// 5 s. A test that wants level 1 at every step lowers it with a short
	// sidecar range. Nothing in production sets it.
	CompactGrace time.Duration
	// Logger gets leadership changes (info), pass counts (debug) and errors
	// (warn); default slog.Default().
	Logger *slog.Logger
}

func (c RetentionConfig) withDefaults() RetentionConfig {
	if c.Interval <= 0 {
		c.Interval = DefaultRetentionInterval
	}
	if c.Batch <= 0 {
		c.Batch = DefaultRetentionBatch
	}
	if c.TxnsFloor <= 0 {
		c.TxnsFloor = DefaultTxnsFloor
	}
	if c.CompactGrace <= 0 {
		c.CompactGrace = compactGrace
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// RetentionStepCount is what one step of a pass deleted.
type RetentionStepCount struct {
	// Statements is how many bounded statements (each its own transaction)
	// the step ran.
	Statements int
	// Rows is the segments (or sidecar rows, or lease rows) deleted.
	Rows int64
	// Messages is the messages those segments held; for the sidecar step,
	// the rows deleted (one per message).
	Messages int64
}

func (c *RetentionStepCount) add(o RetentionStepCount) {
	c.Statements += o.Statements
	c.Rows += o.Rows
	c.Messages += o.Messages
}

// RetentionCounts is what a pass (or a loop so far) deleted, per step.
type RetentionCounts struct {
	// Expired: segments older than their queue's retentionSeconds.
	Expired RetentionStepCount
	// Completed: segments older than completedRetentionSeconds that every
	// consumer group committed past.
	Completed RetentionStepCount
	// Sidecar: level-0 rows past every queue's sidecar floor deleted from
	// the DEFAULT partition of log_txn_hashes (Rows and Messages alike).
	Sidecar RetentionStepCount
	// Leases: expired rows of queen.consumer_leases, the index of leases
	// by id (Rows and Messages alike; migration 0014).
	Leases RetentionStepCount
	// Ranges: time ranges of the per-hash sidecar index created, compacted
	// into level 1, re-filled after a crash, dropped, or deferred to the
	// next pass (lock busy).
	Ranges SidecarRanges
	// SegmentRanges: time ranges of segments_timed (the segments of queues
	// with retentionSeconds) created, dropped whole, or deferred.
	SegmentRanges SidecarRanges
	// Ends: rows of queen.partition_ends (the partitions' allocators,
	// UNLOGGED) rebuilt after a crash or a failover emptied them.
	Ends int64
}

func (c *RetentionCounts) add(o RetentionCounts) {
	c.Expired.add(o.Expired)
	c.Completed.add(o.Completed)
	c.Sidecar.add(o.Sidecar)
	c.Leases.add(o.Leases)
	c.Ranges.Created += o.Ranges.Created
	c.Ranges.Dropped += o.Ranges.Dropped
	c.Ranges.Deferred += o.Ranges.Deferred
	c.Ranges.Compacted += o.Ranges.Compacted
	c.Ranges.Hashes += o.Ranges.Hashes
	c.Ranges.Refilled += o.Ranges.Refilled
	c.Ranges.Printed += o.Ranges.Printed
	c.Ranges.Merged += o.Ranges.Merged
	c.Ranges.MergedHashes += o.Ranges.MergedHashes
	c.SegmentRanges.Created += o.SegmentRanges.Created
	c.SegmentRanges.Dropped += o.SegmentRanges.Dropped
	c.SegmentRanges.Deferred += o.SegmentRanges.Deferred
	c.Ends += o.Ends
}

// Deleted reports whether anything was deleted.
func (c RetentionCounts) Deleted() bool {
	return c.Expired.Rows+c.Completed.Rows+c.Sidecar.Rows+c.Leases.Rows+int64(c.Ranges.Dropped+c.SegmentRanges.Dropped) > 0
}

// rowQuerier is what a pass runs its statements on: the pool, or the loop's
// own connection.
type rowQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	txBeginner
}

// RetentionStep runs one retention pass on the pool, now, without the
// loop's lock: the sidecar's range creation (EnsureSidecarRanges), then the
// deleting steps, each as bounded statements that commit on their own until
// one deletes less than a full batch, then the drop of expired sidecar
// ranges. For tests and maintenance; brokers run the loop (NewRetention).
// cfg.Interval is unused. A failing step does not stop the others; the
// error joins their errors.
func (s *Store) RetentionStep(ctx context.Context, cfg RetentionConfig) (RetentionCounts, error) {
	r, err := s.EnsureSidecarRanges(ctx)
	sr, serr := s.EnsureSegmentRanges(ctx)
	c, perr := retentionPass(ctx, s.pool, cfg.withDefaults(), 0, ctx.Done())
	c.Ranges.Created += r.Created
	c.Ranges.Deferred += r.Deferred
	c.SegmentRanges.Created += sr.Created
	c.SegmentRanges.Deferred += sr.Deferred
	return c, errors.Join(err, serr, perr)
}

// retentionPass runs the deleting steps on db, then drops the expired
// sidecar ranges. Statements run under ctx (each with its own timeout when
// timeout > 0); stop is checked between statements, so a statement in
// flight always finishes.
func retentionPass(ctx context.Context, db rowQuerier, cfg RetentionConfig, timeout time.Duration, stop <-chan struct{}) (RetentionCounts, error) {
	var c RetentionCounts
	batch := int64(cfg.Batch)
	floor := cfg.TxnsFloor.Seconds()
	steps := []struct {
		name  string
		sql   string
		args  []any
		count *RetentionStepCount
	}{
		{"expired segments", sqlRetentionExpired, []any{batch, rangeGrace(cfg)}, &c.Expired},
		{"completed segments", sqlRetentionCompleted, []any{batch}, &c.Completed},
		{"sidecar", sqlRetentionSidecar, []any{batch, floor}, &c.Sidecar},
		{"expired leases", sqlRetentionLeases, []any{batch}, &c.Leases},
	}
	var errs []error
	// First, the allocator rows a crash or a failover emptied (UNLOGGED,
	// migration 0019) are rebuilt; brokers rebuild their own pushes' rows,
	// this covers the partitions nobody pushes to.
	if !stopped(stop) {
		n, err := rebuildPartitionEnds(ctx, db)
		c.Ends += n
		if err != nil {
			errs = append(errs, fmt.Errorf("retention: %w", err))
		}
	}
	// Then the closed level-0 sidecar ranges go to level 1 (and a range a
	// crash emptied is rebuilt: lookups that need it fail until then).
	if !stopped(stop) {
		sctx := ctx
		if timeout > 0 {
			var cancel context.CancelFunc
			sctx, cancel = context.WithTimeout(ctx, 4*timeout) // a range's build reads all of it
			defer cancel()
		}
		r, err := compactSidecarRanges(sctx, db, cfg.CompactGrace)
		c.Ranges.Compacted += r.Compacted
		c.Ranges.Hashes += r.Hashes
		c.Ranges.Refilled += r.Refilled
		c.Ranges.Printed += r.Printed
		c.Ranges.Merged += r.Merged
		c.Ranges.MergedHashes += r.MergedHashes
		c.Ranges.Deferred += r.Deferred
		if err != nil {
			errs = append(errs, fmt.Errorf("retention: sidecar compaction: %w", err))
		}
		if r.Compacted+r.Refilled+r.Printed+r.Merged+r.Deferred > 0 {
			cfg.Logger.Debug("retention sidecar compaction", "compacted", r.Compacted, "hashes", r.Hashes, "refilled", r.Refilled, "printed", r.Printed, "merged", r.Merged, "merged_hashes", r.MergedHashes, "deferred", r.Deferred)
		}
	}
	// Then the segment ranges whose rows are all past their queue's
	// retention go whole: a walk below would otherwise delete their rows one
	// by one once they are a grace past it.
	if !stopped(stop) {
		sctx := ctx
		if timeout > 0 {
			var cancel context.CancelFunc
			sctx, cancel = context.WithTimeout(ctx, timeout)
			defer cancel()
		}
		r, err := dropSegmentRanges(sctx, db)
		c.SegmentRanges.Dropped += r.Dropped
		c.SegmentRanges.Deferred += r.Deferred
		if err != nil {
			errs = append(errs, fmt.Errorf("retention: segment ranges: %w", err))
		}
		if r.Dropped+r.Deferred > 0 {
			cfg.Logger.Debug("retention segment ranges", "dropped", r.Dropped, "deferred", r.Deferred)
		}
	}
	for _, st := range steps {
		// QueryExecModeExec: planned for these arguments on every run, never
		// a generic plan cached while the tables were small.
		args := append([]any{pgx.QueryExecModeExec}, st.args...)
		began := time.Now()
		for range retentionMaxStatements {
			if stopped(stop) {
				return c, errors.Join(errs...)
			}
			if time.Since(began) > retentionStepBudget {
				break // the next pass goes on: range upkeep runs between passes
			}
			var rows, msgs int64
			err := func() error {
				sctx := ctx
				if timeout > 0 {
					var cancel context.CancelFunc
					sctx, cancel = context.WithTimeout(ctx, timeout)
					defer cancel()
				}
				return db.QueryRow(sctx, st.sql, args...).Scan(&rows, &msgs)
			}()
			if err != nil {
				errs = append(errs, fmt.Errorf("retention: %s: %w", st.name, unavailable(err)))
				break
			}
			st.count.Statements++
			st.count.Rows += rows
			st.count.Messages += msgs
			cfg.Logger.Debug("retention statement", "step", st.name, "rows", rows, "messages", msgs)
			if rows < batch && msgs < batch {
				break // not a full batch: the step is done
			}
		}
	}
	// Last, the sidecar ranges past every queue's floor go.
	if !stopped(stop) {
		sctx := ctx
		if timeout > 0 {
			var cancel context.CancelFunc
			sctx, cancel = context.WithTimeout(ctx, timeout)
			defer cancel()
		}
		r, err := dropSidecarRanges(sctx, db, floor)
		c.Ranges.Dropped += r.Dropped
		c.Ranges.Deferred += r.Deferred
		if err != nil {
			errs = append(errs, fmt.Errorf("retention: sidecar ranges: %w", err))
		}
		if r.Dropped+r.Deferred > 0 {
			cfg.Logger.Debug("retention sidecar ranges", "dropped", r.Dropped, "deferred", r.Deferred)
		}
	}
	return c, errors.Join(errs...)
}

// rangeGrace is retention_expired's $2: the seconds of a pass added to the
// range span a segment of segments_timed is left for its range's drop (the
// retention interval and 30 s), or nil for none (NoRangeGrace).
func rangeGrace(cfg RetentionConfig) *float64 {
	if cfg.NoRangeGrace {
		return nil
	}
	g := (cfg.Interval + 30*time.Second).Seconds()
	return &g
}

// withFloor splices the floor step (sql/retention_floor.sql) into a
// retention statement in place of its one {{floor}} line: both deleting
// statements raise the floors by the same rule, kept in one file. It panics
// unless the marker is there exactly once (a build-time bug).
func withFloor(stmt string) string {
	const marker = "{{floor}}"
	if strings.Count(stmt, marker) != 1 {
		panic("persistence: a retention statement must hold exactly one " + marker)
	}
	return strings.Replace(stmt, marker, strings.TrimRight(q("retention_floor"), "\n"), 1)
}

func stopped(stop <-chan struct{}) bool {
	select {
	case <-stop:
		return true
	default:
		return false
	}
}

// Retention is the retention loop: every Interval it runs a pass, while it
// holds a session advisory lock on its own connection, so one broker at a
// time deletes (SPEC.md §7). The pass runs on that connection: a loop whose
// connection drops stops deleting at once and the lock goes to another
// broker; it reconnects and tries the lock again on its next tick.
type Retention struct {
	store *Store
	cfg   RetentionConfig
	log   *slog.Logger

	stop     chan struct{}
	stopOnce sync.Once
	mu       sync.Mutex
	done     chan struct{} // closed when the loop returns; nil before Start
	totals   RetentionCounts
	passes   int64
	leader   atomic.Bool
}

// NewRetention returns a stopped retention loop on the store's database.
// It refuses (a *lifecycle.SettingError) a negative Interval, Batch or
// TxnsFloor; zero values take the defaults.
func (s *Store) NewRetention(cfg RetentionConfig) (*Retention, error) {
	if err := errors.Join(
		lifecycle.NotNegative("RetentionConfig.Interval", cfg.Interval),
		lifecycle.NotNegative("RetentionConfig.Batch", cfg.Batch),
		lifecycle.NotNegative("RetentionConfig.TxnsFloor", cfg.TxnsFloor),
	); err != nil {
		return nil, fmt.Errorf("persistence: %w", err)
	}
	cfg = cfg.withDefaults()
	return &Retention{store: s, cfg: cfg, log: cfg.Logger, stop: make(chan struct{})}, nil
}

// Start runs the loop in a goroutine until Stop; its first pass starts at
// once. ctx is not kept. A second Start, or a Start after Stop, does
// nothing.
func (r *Retention) Start(context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done != nil {
		return nil
	}
	r.done = make(chan struct{})
	go r.run(r.done)
	return nil
}

// Stop stops the loop: it lets the statement in flight finish (each
// deletes at most a batch; retentionStatementTimeout bounds it), releases the
// lock, closes the connection and returns once the loop has, or when ctx
// ends (ctx.Err()). Safe to call more than once, and before Start.
func (r *Retention) Stop(ctx context.Context) error {
	r.stopOnce.Do(func() { close(r.stop) })
	r.mu.Lock()
	done := r.done
	r.mu.Unlock()
	if done == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Leader reports whether this loop holds the retention lock now.
func (r *Retention) Leader() bool { return r.leader.Load() }

// Totals returns what this loop has deleted so far and how many passes it
// ran as the leader.
func (r *Retention) Totals() (RetentionCounts, int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.totals, r.passes
}

func (r *Retention) run(done chan struct{}) {
	defer close(done)
	// stopCtx ends with Stop: it interrupts connecting and waiting, never a
	// delete statement.
	stopCtx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-r.stop:
			cancel()
		case <-stopCtx.Done():
		}
	}()
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			r.release(conn)
		}
	}()
	timer := time.NewTimer(0) // the first pass at once
	defer timer.Stop()
	for {
		select {
		case <-stopCtx.Done():
			return
		case <-timer.C:
		}
		if stopCtx.Err() != nil {
			return
		}
		conn = r.tick(stopCtx, conn)
		timer.Reset(r.cfg.Interval)
	}
}

// tick makes sure of the connection and the lock, then runs a pass as the
// leader. It returns the connection to keep (nil: reconnect next time).
func (r *Retention) tick(stopCtx context.Context, conn *pgx.Conn) *pgx.Conn {
	if conn != nil && conn.IsClosed() {
		r.lost(conn, errors.New("connection closed"))
		conn = nil
	}
	if conn == nil {
		cctx, cancel := context.WithTimeout(stopCtx, retentionStatementTimeout)
		defer cancel()
		cc := r.store.pool.Config().ConnConfig
		cc.RuntimeParams["application_name"] = "queen-retention"
		c, err := pgx.ConnectConfig(cctx, cc)
		if err != nil {
			if stopCtx.Err() == nil {
				r.log.Warn("retention: cannot connect; retrying next interval", "err", err)
			}
			return nil
		}
		conn = c
	}
	// Every broker keeps the sidecar's ranges ahead of time (only the
	// leader drops them).
	ectx, ecancel := context.WithTimeout(stopCtx, retentionStatementTimeout)
	made, err := ensureSidecarRanges(ectx, conn, r.store.span)
	if err == nil {
		var seg SidecarRanges
		seg, err = ensureSegmentRanges(ectx, conn)
		r.mu.Lock()
		r.totals.SegmentRanges.Created += seg.Created
		r.totals.SegmentRanges.Deferred += seg.Deferred
		r.mu.Unlock()
	}
	ecancel()
	if err != nil {
		r.store.full.note(err)
		if conn.IsClosed() {
			r.lost(conn, err)
			return nil
		}
		r.log.Warn("retention: cannot create sidecar ranges; retrying next interval", "err", err)
	} else if made.Deferred > 0 {
		r.log.Debug("retention: sidecar range creation deferred (table busy)", "deferred", made.Deferred)
	}
	if made.Created+made.Deferred > 0 {
		r.mu.Lock()
		r.totals.Ranges.Created += made.Created
		r.totals.Ranges.Deferred += made.Deferred
		r.mu.Unlock()
	}
	if !r.leader.Load() {
		lctx, cancel := context.WithTimeout(stopCtx, retentionStatementTimeout)
		defer cancel()
		var got bool
		if err := conn.QueryRow(lctx, sqlRetentionLock).Scan(&got); err != nil {
			if stopCtx.Err() == nil {
				r.lost(conn, err)
			} else {
				conn.Close(context.Background()) //nolint:errcheck
			}
			return nil
		}
		if !got {
			return conn // another broker runs retention
		}
		r.leader.Store(true)
		r.log.Info("retention: this broker runs the retention loop", "interval", r.cfg.Interval, "batch", r.cfg.Batch)
	}
	// Statements are not interrupted by Stop: they finish (bounded by the
	// batch and the timeout) and Stop waits for them.
	counts, err := retentionPass(context.WithoutCancel(stopCtx), conn, r.cfg, retentionStatementTimeout, stopCtx.Done())
	r.mu.Lock()
	r.totals.add(counts)
	r.passes++
	r.mu.Unlock()
	if counts.Deleted() {
		r.log.Debug("retention pass",
			"expired_segments", counts.Expired.Rows, "expired_messages", counts.Expired.Messages,
			"completed_segments", counts.Completed.Rows, "completed_messages", counts.Completed.Messages,
			"sidecar_rows", counts.Sidecar.Rows, "expired_leases", counts.Leases.Rows, "sidecar_ranges_dropped", counts.Ranges.Dropped, "segment_ranges_dropped", counts.SegmentRanges.Dropped)
	}
	if err != nil {
		r.store.full.note(err)
		if conn.IsClosed() {
			r.lost(conn, err)
			return nil
		}
		r.log.Warn("retention pass failed; retrying next interval", "err", err)
	}
	return conn
}

// lost drops a broken connection and with it the lock.
func (r *Retention) lost(conn *pgx.Conn, err error) {
	if r.leader.Swap(false) {
		r.log.Warn("retention: lost the connection holding the retention lock; another broker may take over", "err", err)
	} else {
		r.log.Warn("retention: connection failed; retrying next interval", "err", err)
	}
	conn.Close(context.Background()) //nolint:errcheck
}

// release unlocks (when leading) and closes the connection.
func (r *Retention) release(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if r.leader.Swap(false) && !conn.IsClosed() {
		var ok bool
		_ = conn.QueryRow(ctx, sqlRetentionUnlock).Scan(&ok) // the session's end releases it anyway
		r.log.Info("retention: stopped; the retention lock is released")
	}
	conn.Close(ctx) //nolint:errcheck
}

// AgePartitions (tests only) moves the stored time of partitions pids back
// by d: their segments and sidecar entries then look d older to the
// window check and retention, which run on PostgreSQL's clock. Hashes in
// compacted sidecar ranges are written to level 0 again under the moved
// time (sql/test_age.sql). Message ids derived from created_at (layout 3)
// are stored first (test_age_pin), so they stay what the pushes answered,
// as when time really passes. Callers hold the brokers' caches meanwhile
// (actors.Age). Nothing in production calls it.
func (s *Store) AgePartitions(ctx context.Context, pids []uuid.UUID, d time.Duration) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, sqlTestAgeUnpinned, pids)
		if err != nil {
			return err
		}
		var segPIDs []uuid.UUID
		var firsts []int64
		var ids [][]byte
		var seg SegmentIDs
		var last int64
		_, err = pgx.ForEachRow(rows, []any{&seg.Partition, &seg.First, &last, &seg.At}, func() error {
			b := make([]byte, 0, 16*(last-seg.First+1))
			for off := seg.First; off <= last; off++ {
				id := messageID(seg.Partition, off, seg.At)
				b = append(b, id[:]...)
			}
			segPIDs, firsts, ids = append(segPIDs, seg.Partition), append(firsts, seg.First), append(ids, b)
			return nil
		})
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, sqlTestAgePin, segPIDs, firsts, ids); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, sqlTestAge, pids, d.Seconds())
		return err
	})
	if err != nil {
		return fmt.Errorf("age partitions: %w", err)
	}
	return nil
}
