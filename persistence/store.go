package persistence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	pgxuuid "github.com/vgarvardt/pgx-google-uuid/v5"

	queen "github.com/queen-mq/queen-go"
)

// Config configures a Store.
type Config struct {
	// URL is a PostgreSQL connection URL (required).
	URL string
	// MaxConns is the pool size; default 32.
	MaxConns int32
	// SidecarRange is the time span of one range of the per-hash sidecar
	// index (log_txn_hashes, partitioned on created_at; SPEC.md §7): whole
	// seconds from 1 s to 24 h, 0 takes the default, 1 min
	// (DefaultSidecarRange; QUEEN_SIDECAR_RANGE). Shorter ranges are dropped
	// sooner after they expire and keep the btree a push inserts into
	// smaller; a cold probe descends one index per range overlapping the
	// window (3600 s / 1 min = 60 compacted ranges, one block row each). Brokers sharing a database should use
	// one span: a range overlapping another span's is not created (its rows
	// go to the DEFAULT partition).
	SidecarRange time.Duration
	// LockTimeout bounds how long one statement of the broker waits for a
	// row or table lock (PostgreSQL's lock_timeout, set on every session of
	// the pool): a partition's row lock in a push or a transaction (SPEC.md
	// §3, §5), a consumer row's in an ack (§4). A push whose partition's lock
	// is not granted in time answers that partition's items failed with code
	// lock_timeout (retryable) and commits the bundle's other partitions
	// without it (CommitBundle); an ack or a transaction fails whole with
	// that code (HTTP 503). 0 takes the default, 5 s (DefaultLockTimeout;
	// QUEEN_LOCK_TIMEOUT); rounded down to whole milliseconds, at least 1 ms.
	LockTimeout time.Duration
	// IdleInTransactionTimeout ends a session of the pool that stays idle
	// inside an open transaction longer than this (PostgreSQL's
	// idle_in_transaction_session_timeout), releasing its locks: a broker
	// paused (SIGSTOP, a stalled VM) in the middle of a push must not hold a
	// partition's row lock until it wakes. A live push or ack idles between
	// its round trips for microseconds, and every one is bounded by the
	// commit deadline (30 s), so the default, 60 s
	// (DefaultIdleInTransactionTimeout, twice that deadline), never ends one
	// that could still commit.
	// 0 takes the default; negative turns the limit off.
	IdleInTransactionTimeout time.Duration
	// LockAtBumpFrom is the fewest partitions their actors know (a
	// watermark and the partition's number: queen.PushBatch.PartitionNum)
	// a push bundle must hold for their row locks to be taken at the
	// allocators' bump instead of before the probe (CommitBundle). The lock
	// statement it saves costs PostgreSQL about 3 µs a partition; the bump
	// then needs a round trip of its own, so a small bundle (dense traffic:
	// tens of partitions, each with many messages) locks first. 0 takes
	// the default, 128 (DefaultLockAtBumpFrom); negative never locks at the
	// bump.
	LockAtBumpFrom int
	// ObserveLock, when set, is called after each measured lock acquisition
	// (LockEvent; SPEC.md §3, §4): for /metrics. It must not block.
	ObserveLock func(LockEvent)
	// idlePing overrides how long a pooled connection may idle before it
	// is pinged on acquisition (0: 1 s); tests only.
	idlePing time.Duration
}

// DefaultLockTimeout is Config.LockTimeout's default (QUEEN_LOCK_TIMEOUT).
const DefaultLockTimeout = 5 * time.Second

// DefaultLockAtBumpFrom is Config.LockAtBumpFrom's default: spread thin, a
// bundle holds hundreds of partitions (about 465 at 10,000 partitions);
// dense, a few tens, and never more than the partitions written (64 in the
// load harness's default shape).
const DefaultLockAtBumpFrom = 128

// DefaultIdleInTransactionTimeout is Config.IdleInTransactionTimeout's
// default: twice the 30 s commit deadline.
const DefaultIdleInTransactionTimeout = 60 * time.Second

// LockEvent is one lock acquisition of the broker's hot paths, measured on
// PostgreSQL's side (from the start of the locking statement to its last
// lock granted), or, when it timed out, the client's wait until the error.
type LockEvent struct {
	// Op is "push" (a bundle's partition row locks), "ack" (a consumer
	// row lock) or "transaction" (a transaction's partition row locks).
	Op string
	// Wait is how long the locks took.
	Wait time.Duration
	// TimedOut reports the statement was cancelled by the lock timeout
	// (SQLSTATE 55P03 lock_not_available).
	TimedOut bool
	// Moved reports a push attempt that found, at the allocators' bump, a
	// partition its actor knew moved by another writer (or without its
	// allocator row): nothing was written and the bundle ran again with
	// every row locked first (Store.CommitBundle). Wait is then zero.
	Moved bool
}

// leaseCounter is the Store's running queen.LeaseStats.
type leaseCounter struct {
	mu sync.Mutex
	n  queen.LeaseStats
}

func (c *leaseCounter) add(o queen.LeaseStats) {
	if o == (queen.LeaseStats{}) {
		return
	}
	c.mu.Lock()
	c.n.Add(o)
	c.mu.Unlock()
}

// queen.LeaseStats returns what the Store has settled of expired leases and
// bisections since it was opened (committed work only).
func (s *Store) LeaseStats() queen.LeaseStats {
	s.leases.mu.Lock()
	defer s.leases.mu.Unlock()
	return s.leases.n
}

// Store is the broker's handle on PostgreSQL. It is safe for concurrent use.
type Store struct {
	leases      leaseCounter
	pool        *pgxpool.Pool
	conns       *connCheck    // which pooled connections are pinged before use (reconnect.go)
	span        time.Duration // Config.SidecarRange
	lockTimeout time.Duration // Config.LockTimeout
	atBumpFrom  int           // Config.LockAtBumpFrom
	observe     func(LockEvent)
	stats       *analyzer // ANALYZE after bulk partition creation (stats.go)
	lost        lostRanges
	known       *knownRows // consumer rows seen to exist (known.go)
	full        fullDisk   // when a statement last met a full disk (diskfull.go)
	// afterCommit, set by tests only (reconnect_test.go), is a statement a
	// session sends after the COMMIT of each round trip that carries one:
	// a fault, such as ending the session right after the COMMIT ran, as
	// a restart's 57P01 can.
	afterCommit string
}

// Open connects a pool to cfg.URL and creates the sidecar's time ranges
// around now (EnsureSidecarRanges), which also checks the schema is
// migrated. It does not migrate: call Migrate first. An invalid
// cfg.SidecarRange is an error.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = 32
	}
	if cfg.SidecarRange == 0 {
		cfg.SidecarRange = DefaultSidecarRange
	}
	if err := CheckSidecarRange(cfg.SidecarRange); err != nil {
		return nil, fmt.Errorf("persistence: %w", err)
	}
	if cfg.LockTimeout == 0 {
		cfg.LockTimeout = DefaultLockTimeout
	}
	if cfg.LockTimeout < time.Millisecond {
		return nil, fmt.Errorf("persistence: lock timeout %v: want at least 1ms", cfg.LockTimeout)
	}
	if cfg.IdleInTransactionTimeout == 0 {
		cfg.IdleInTransactionTimeout = DefaultIdleInTransactionTimeout
	}
	if cfg.LockAtBumpFrom == 0 {
		cfg.LockAtBumpFrom = DefaultLockAtBumpFrom
	}
	settings := map[string]string{"lock_timeout": strconv.FormatInt(cfg.LockTimeout.Milliseconds(), 10) + "ms"}
	if cfg.IdleInTransactionTimeout > 0 {
		settings["idle_in_transaction_session_timeout"] = strconv.FormatInt(max(cfg.IdleInTransactionTimeout.Milliseconds(), 1), 10) + "ms"
	}
	conns := newConnCheck(cfg.idlePing)
	pool, err := openPool(ctx, cfg.URL, cfg.MaxConns, settings, conns)
	if err != nil {
		return nil, err
	}
	observe := cfg.ObserveLock
	if observe == nil {
		observe = func(LockEvent) {}
	}
	s := &Store{pool: pool, conns: conns, span: cfg.SidecarRange, lockTimeout: cfg.LockTimeout, atBumpFrom: cfg.LockAtBumpFrom, observe: observe, known: &knownRows{}}
	s.stats = newAnalyzer(s.analyzePartitions)
	s.lost.ctx, s.lost.cancel = context.WithCancel(context.Background())
	if _, err := s.EnsureSidecarRanges(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	// After a database crash (or on a promoted standby, or a copy of the
	// database) the level-0 ranges are empty: re-fill the open ones now,
	// rather than fail lookups until the retention leader's next pass.
	if _, err := refillLostRanges(ctx, s.pool); err != nil {
		pool.Close()
		return nil, err
	}
	if _, err := s.EnsureSegmentRanges(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	// Likewise the partitions' allocator rows (UNLOGGED, migration 0019):
	// rebuilt now, so readers do not compute every partition's end from its
	// segments until the next push to it.
	if _, err := rebuildPartitionEnds(ctx, s.pool); err != nil {
		pool.Close()
		return nil, err
	}
	return s, nil
}

// rebuildPartitionEnds rebuilds every row of queen.partition_ends that a
// crash or a failover emptied (partition_ends_ensure; migration 0019) and
// returns how many it inserted. Cheap when none is missing: one anti-join
// over the partitions.
func rebuildPartitionEnds(ctx context.Context, db interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}) (int64, error) {
	var n int64
	if err := db.QueryRow(ctx, sqlPartitionEndsEnsure, nil).Scan(&n); err != nil {
		return 0, unavailable(fmt.Errorf("rebuild partition ends: %w", err))
	}
	return n, nil
}

// openPool connects a pool of up to maxConns connections to url, with extra
// session settings, and checks the server answers. conns (nil: a fresh
// one) decides which connections are pinged before use (reconnect.go).
func openPool(ctx context.Context, url string, maxConns int32, settings map[string]string, conns *connCheck) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("persistence: bad database URL: %w", err)
	}
	// Every statement here is a short OLTP statement: JIT compilation costs
	// tens of milliseconds and is triggered by cost estimates of branches
	// that usually read nothing (the probe's narrowed scan).
	pc.ConnConfig.RuntimeParams["jit"] = "off"
	for k, v := range settings {
		pc.ConnConfig.RuntimeParams[k] = v
	}
	// A multi-host URL with target_session_attrs=read-write picks the
	// server whose session is not read-only; a read-only pool (the audit's)
	// makes every session read-only, so it picks the primary instead (not
	// in recovery), where the writers are.
	if settings["default_transaction_read_only"] == "on" && pc.ConnConfig.ValidateConnect != nil {
		pc.ConnConfig.ValidateConnect = pgconn.ValidateConnectTargetSessionAttrsPrimary
	}
	pc.MaxConns = maxConns
	if conns == nil {
		conns = newConnCheck(0)
	}
	conns.install(pc)
	// uuid.UUID as PostgreSQL's uuid in binary, arrays included: without
	// it pgx encodes each one through driver.Valuer (a 36-character string
	// planned and parsed per element), which took a tenth of the broker's
	// CPU at 10,000 partitions (the pops' and acks' uuid[] arguments).
	connected := pc.AfterConnect
	pc.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		pgxuuid.Register(c.TypeMap())
		return connected(ctx, c)
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, unavailable(err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, unavailable(err)
	}
	return pool, nil
}

// Close stops the background ANALYZE (stats.go) and closes the pool,
// waiting for connections in use to be returned.
func (s *Store) Close() {
	s.lost.close()
	s.stats.close()
	s.pool.Close()
}

// Ping checks the database answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return unavailable(err)
	}
	return nil
}

// unavailable wraps a database error as queen.ErrUnavailable (retryable):
// queen.ErrStorageFull when the database is out of disk space,
// queen.ErrLockTimeout for a lock not granted in time, queen.ErrTimeout for
// an interrupted call; a *queen.Error is returned as it is.
func unavailable(err error) error {
	if err == nil {
		return nil
	}
	var qe *queen.Error
	if errors.As(err, &qe) {
		return err
	}
	if storageFull(err) {
		return storageFullError(err)
	}
	if lockTimedOut(err) {
		return queen.ErrLockTimeout.With("a row lock was not granted within the lock timeout (QUEEN_LOCK_TIMEOUT): %v", err)
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return queen.ErrTimeout.With("database call interrupted: %v", err)
	}
	return queen.ErrUnavailable.With("database unavailable: %v", err)
}

// lockTimedOut reports whether err is PostgreSQL's lock_not_available
// (SQLSTATE 55P03): a statement cancelled by lock_timeout.
func lockTimedOut(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "55P03"
}

// deadlocked reports whether err is PostgreSQL's deadlock_detected (40P01):
// the statement's transaction was chosen to end a deadlock, and rolled back.
func deadlocked(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "40P01"
}

// EnsurePartition returns the id of partition (queue, name), creating the
// queue with default options and the partition on first use (SPEC.md §1).
func (s *Store) EnsurePartition(ctx context.Context, queueName, partition string) (uuid.UUID, error) {
	var id uuid.UUID
	err := s.retryBroken(ctx, func() error {
		return s.pool.QueryRow(ctx, sqlGetPartition, queueName, partition).Scan(&id)
	})
	if err == nil {
		return id, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return uuid.Nil, unavailable(err)
	}
	opts := queen.DefaultOptions()
	optsJSON, _ := json.Marshal(opts)
	fresh, err := uuid.NewV7()
	if err != nil {
		return uuid.Nil, err
	}
	var c created
	if err := s.retryBroken(ctx, func() error {
		c = created{}
		b := &pgx.Batch{}
		b.Queue(sqlEnsureQueue, queueName, optsJSON, opts.DedupWindowSeconds, opts.DedupCheckPayload)
		b.Queue(sqlEnsurePartition, queueName, partition, fresh).Exec(c.count)
		b.Queue(sqlGetPartition, queueName, partition).QueryRow(func(row pgx.Row) error { return row.Scan(&id) })
		return s.pool.SendBatch(ctx, b).Close()
	}); err != nil {
		return uuid.Nil, unavailable(err)
	}
	s.stats.add(c.n)
	return id, nil
}

// EnsurePartitions returns the ids of several partitions, in the order of
// keys, creating queues (with default options) and partitions on first use
// (SPEC.md §1), like EnsurePartition for each key but in two or three round
// trips whatever their number: one read of the ids; for the missing ones one
// pipeline that creates their queues and, in one statement, the partitions
// (sorted, so concurrent creators take the unique index's locks in one
// order), then reads their ids. A key may repeat. Errors are
// queen.ErrUnavailable (retryable; nothing half-done matters: creation is
// idempotent).
func (s *Store) EnsurePartitions(ctx context.Context, keys []queen.PartitionKey) ([]uuid.UUID, error) {
	ids := make([]uuid.UUID, len(keys))
	found := make([]bool, len(keys))
	read := func(idx []int, b *pgx.Batch) {
		qs, ps := make([]string, len(idx)), make([]string, len(idx))
		for j, i := range idx {
			qs[j], ps[j] = keys[i].Queue, keys[i].Partition
		}
		b.Queue(sqlGetPartitions, qs, ps).Query(func(rows pgx.Rows) error {
			var ord int64
			var id uuid.UUID
			_, err := pgx.ForEachRow(rows, []any{&ord, &id}, func() error {
				i := idx[ord-1]
				ids[i], found[i] = id, true
				return nil
			})
			return err
		})
	}
	all := make([]int, len(keys))
	for i := range all {
		all[i] = i
	}
	if err := s.retryBroken(ctx, func() error {
		b := &pgx.Batch{}
		read(all, b)
		return s.pool.SendBatch(ctx, b).Close()
	}); err != nil {
		return nil, unavailable(err)
	}
	var missing []int
	for i := range keys {
		if !found[i] {
			missing = append(missing, i)
		}
	}
	if len(missing) == 0 {
		return ids, nil
	}
	sort.Slice(missing, func(a, b int) bool {
		ka, kb := keys[missing[a]], keys[missing[b]]
		if ka.Queue != kb.Queue {
			return ka.Queue < kb.Queue
		}
		return ka.Partition < kb.Partition
	})
	opts := queen.DefaultOptions()
	optsJSON, _ := json.Marshal(opts)
	var queues []string
	queued := map[string]bool{}
	qs, ps, fresh := make([]string, 0, len(missing)), make([]string, 0, len(missing)), make([]pgtype.UUID, 0, len(missing))
	for _, i := range missing {
		k := keys[i]
		if !queued[k.Queue] {
			queued[k.Queue] = true
			queues = append(queues, k.Queue)
		}
		id, err := uuid.NewV7()
		if err != nil {
			return nil, err
		}
		qs, ps, fresh = append(qs, k.Queue), append(ps, k.Partition), append(fresh, pgUUID(id))
	}
	var c created
	if err := s.retryBroken(ctx, func() error {
		c = created{}
		b := &pgx.Batch{}
		for _, q := range queues {
			b.Queue(sqlEnsureQueue, q, optsJSON, opts.DedupWindowSeconds, opts.DedupCheckPayload)
		}
		b.Queue(sqlEnsurePartitions, qs, ps, fresh).Exec(c.count)
		read(missing, b)
		return s.pool.SendBatch(ctx, b).Close()
	}); err != nil {
		return nil, unavailable(err)
	}
	s.stats.add(c.n)
	for _, i := range missing {
		if !found[i] {
			// Its queue was deleted between the statements: the caller
			// retries (a push answers failed, retryable).
			return nil, queen.ErrUnavailable.With("partition %q of queue %q could not be created (its queue was deleted meanwhile); retry", keys[i].Partition, keys[i].Queue)
		}
	}
	return ids, nil
}

// Queue returns a queue's description with its effective options, or an
// error matching queen.ErrNotFound.
func (s *Store) Queue(ctx context.Context, name string) (queen.QueueInfo, error) {
	var qi queen.QueueInfo
	var opts []byte
	err := s.pool.QueryRow(ctx, sqlGetQueue, name).Scan(&qi.Name, &qi.Namespace, &qi.Task, &opts, &qi.CreatedAt, &qi.Partitions, &qi.Messages)
	if errors.Is(err, pgx.ErrNoRows) {
		return qi, queen.ErrNotFound.With("queue %q does not exist", name)
	}
	if err != nil {
		return qi, unavailable(err)
	}
	if err := json.Unmarshal(opts, &qi.Options); err != nil {
		return qi, err
	}
	return qi, nil
}

// Configure creates or reconfigures a queue: req.Options (validated by the
// wire decoder) are applied to the stored options with req.Merge, else to
// the defaults (a full replace: every omitted option returns to its
// default, SPEC.md §6). res.Changed lists what differs from the stored
// options (from the defaults for a queue it creates).
func (s *Store) Configure(ctx context.Context, req queen.ConfigureRequest) (queen.ConfigureResult, error) {
	res := queen.ConfigureResult{Queue: req.Queue, Namespace: req.Namespace, Task: req.Task}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		def := queen.DefaultOptions()
		defJSON, _ := json.Marshal(def)
		tag, err := tx.Exec(ctx, sqlEnsureQueue, req.Queue, defJSON, def.DedupWindowSeconds, def.DedupCheckPayload)
		if err != nil {
			return err
		}
		res.Created = tag.RowsAffected() == 1
		var stored []byte
		var ns, task string
		if err := tx.QueryRow(ctx, sqlConfigureLock, req.Queue).Scan(&stored, &ns, &task); err != nil {
			return err
		}
		var old queen.Options
		if err := json.Unmarshal(stored, &old); err != nil {
			return err
		}
		base := queen.DefaultOptions()
		if req.Merge {
			base = old
		}
		next := req.Options.Apply(base)
		if req.Guard != nil {
			if err := req.Guard(res.Created, old, next); err != nil {
				return err // rolled back: nothing written
			}
		}
		nextJSON, err := json.Marshal(next)
		if err != nil {
			return err
		}
		nsNext, taskNext := ns, task
		if req.NamespaceSet {
			nsNext = req.Namespace
		}
		if req.TaskSet {
			taskNext = req.Task
		}
		if _, err := tx.Exec(ctx, sqlConfigureUpdate, req.Queue, nsNext, taskNext, nextJSON, next.DedupWindowSeconds, next.DedupCheckPayload); err != nil {
			return err
		}
		res.Options, res.Namespace, res.Task = next, nsNext, taskNext
		if res.Created {
			res.Changed = diffOptions(def, next)
		} else {
			res.Changed = diffOptions(old, next)
		}
		for _, l := range [...]struct{ name, from, to string }{{"namespace", ns, nsNext}, {"task", task, taskNext}} {
			if l.from != l.to {
				if res.Changed == nil {
					res.Changed = map[string]queen.Change{}
				}
				res.Changed[l.name] = queen.Change{From: l.from, To: l.to}
			}
		}
		return nil
	})
	if err != nil {
		return res, unavailable(err)
	}
	if _, ok := res.Changed["retentionSeconds"]; ok && res.Options.RetentionSeconds > 0 {
		// The queue's next segments go to segments_timed: make its ranges
		// now rather than at the next retention tick (best effort: a row
		// without its range goes to the DEFAULT partition meanwhile).
		s.EnsureSegmentRanges(ctx) //nolint:errcheck
	}
	return res, nil
}

// diffOptions lists the options whose values differ between old and new, by
// wire name (SPEC.md §6: a configure reply's "changed").
func diffOptions(old, new queen.Options) map[string]queen.Change {
	a, b := old.Map(), new.Map()
	out := map[string]queen.Change{}
	for k, v := range b {
		if w, ok := a[k]; !ok || fmt.Sprint(rawText(w)) != fmt.Sprint(rawText(v)) {
			if !ok {
				w = nil
			}
			out[k] = queen.Change{From: w, To: v}
		}
	}
	for k, w := range a {
		if _, ok := b[k]; !ok {
			out[k] = queen.Change{From: w, To: nil}
		}
	}
	return out
}

// rawText turns a not-enforced option's raw JSON into a string, so that
// fmt.Sprint compares its text.
func rawText(v any) any {
	if r, ok := v.(json.RawMessage); ok {
		return string(r)
	}
	return v
}
