package persistence

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	queen "github.com/queen-mq/queen-go"
)

// A pooled connection the server or the network ended while it sat in the
// pool (a restart or a failover terminates every session with SQLSTATE
// 57P01; pg_terminate_backend; a firewall's idle timeout) is never a
// client's error (SPEC.md §9). Two things see to it:
//
//   - The pool checks connections before handing them out (connCheck): one
//     idle for over a second is pinged (pgxpool's own rule), and once any
//     connection was found dead, every connection made before that moment is
//     pinged on its next acquisition, so the dead ones are dropped and the
//     live ones kept.
//   - A push, pop or ack whose connection is found closed before the round
//     trip carrying its COMMIT was sent (the pooled connection was dead when
//     handed out, or the session was ended mid-way: its transaction rolled
//     back) runs once more on a checked connection (Store.inSession); so do
//     the reads and idempotent writes of the push and pop paths
//     (Store.retryBroken). A COMMIT round trip the server answered with an
//     error (57P01 before the COMMIT ran included) rolled back and counts as
//     not sent. Any other failure once the COMMIT was sent keeps today's
//     answer (a push's or an ack's queen.ErrCommitUnknown, a pop's
//     queen.ErrUnavailable): only the client's retry may decide it.

// pingTimeout bounds a pool's liveness ping: a connection whose peer
// vanished without closing it (a failed-over host) is dropped after this
// instead of hanging the acquisition until the caller's deadline.
const pingTimeout = 5 * time.Second

// idlePing is how long a pooled connection may idle before it is pinged on
// acquisition (pgxpool's default rule, kept).
const idlePing = time.Second

// connCheck decides which pooled connections are pinged before use. It
// keeps the time each connection was made or last checked, and the moment a
// dead connection was last found (suspect): connections not checked since
// are pinged.
type connCheck struct {
	idle    time.Duration // ping a connection idle for longer (idlePing)
	mu      sync.Mutex
	checked map[*pgx.Conn]time.Time
	suspect time.Time
	// broken counts the dead connections found (markBroken), retried the
	// attempts run again on a fresh connection; for tests and metrics.
	broken, retried atomic.Int64
}

// newConnCheck returns a connCheck pinging connections idle for over idle
// (0: idlePing).
func newConnCheck(idle time.Duration) *connCheck {
	if idle <= 0 {
		idle = idlePing
	}
	return &connCheck{idle: idle, checked: map[*pgx.Conn]time.Time{}}
}

// install sets pc's hooks: AfterConnect and BeforeClose keep the ages,
// ShouldPing pings a connection idle for over idlePing or not checked since
// the last dead connection was found; PingTimeout bounds the ping.
func (cc *connCheck) install(pc *pgxpool.Config) {
	pc.AfterConnect = func(_ context.Context, c *pgx.Conn) error {
		cc.mu.Lock()
		cc.checked[c] = time.Now()
		cc.mu.Unlock()
		return nil
	}
	pc.BeforeClose = func(c *pgx.Conn) {
		cc.mu.Lock()
		delete(cc.checked, c)
		cc.mu.Unlock()
	}
	pc.ShouldPing = func(_ context.Context, p pgxpool.ShouldPingParams) bool {
		if p.IdleDuration > cc.idle {
			return true
		}
		cc.mu.Lock()
		defer cc.mu.Unlock()
		at, ok := cc.checked[p.Conn]
		if ok && !at.Before(cc.suspect) {
			return false
		}
		// A failed ping destroys the connection (BeforeClose forgets it).
		cc.checked[p.Conn] = time.Now()
		return true
	}
	pc.PingTimeout = pingTimeout
}

// markBroken records that a pooled connection was found dead: every
// connection made or checked before now is pinged before its next use.
func (cc *connCheck) markBroken() {
	cc.broken.Add(1)
	cc.mu.Lock()
	cc.suspect = time.Now()
	cc.mu.Unlock()
}

// session is one attempt's pooled connection. It records whether a round
// trip ended with the connection closed (broken: the server or the network
// ended the session) and whether a COMMIT was sent (commitSent, set by
// willCommit before that round trip): a broken attempt that sent no COMMIT
// committed nothing.
type session struct {
	pooled     *pgxpool.Conn
	broken     bool
	commitSent bool
	// rangeLost: a round trip failed with SQLSTATE QS001, a level-0
	// sidecar range a database crash emptied (migration 0011).
	rangeLost bool
	// full: a round trip failed because the database is out of disk space
	// (storageFull).
	full bool
	// afterCommit: Store.afterCommit (a test's fault).
	afterCommit string
}

// Conn is the underlying connection.
func (c *session) Conn() *pgx.Conn { return c.pooled.Conn() }

// note records whether the round trip that returned err broke the
// connection, and returns err.
func (c *session) note(err error) error {
	if err != nil && c.pooled.Conn().IsClosed() {
		c.broken = true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == sqlstateRangeLost {
		c.rangeLost = true
	}
	if storageFull(err) {
		c.full = true
	}
	return err
}

// sqlstateRangeLost is the SQLSTATE a sidecar lookup raises when a level-0
// range it needs was emptied by a database crash or a failover (QS001,
// migration 0011): the request fails retryable until the range is rebuilt.
const sqlstateRangeLost = "QS001"

// Exec runs one statement on the connection.
func (c *session) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	tag, err := c.pooled.Exec(ctx, sql, args...)
	return tag, c.note(err)
}

// QueryRow runs one query on the connection; its Scan records the outcome.
func (c *session) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return sessionRow{c.pooled.QueryRow(ctx, sql, args...), c}
}

// CopyFrom copies rows into table on the connection (COPY FROM STDIN).
func (c *session) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, rows pgx.CopyFromSource) (int64, error) {
	n, err := c.pooled.CopyFrom(ctx, table, columns, rows)
	return n, c.note(err)
}

// SendBatch sends b on the connection; its Close records the outcome.
func (c *session) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if c.afterCommit != "" && slices.ContainsFunc(b.QueuedQueries, func(q *pgx.QueuedQuery) bool { return q.SQL == "COMMIT" }) {
		b.Queue(c.afterCommit)
	}
	return &sessionTrip{BatchResults: c.pooled.SendBatch(ctx, b), c: c}
}

type sessionRow struct {
	pgx.Row
	c *session
}

func (r sessionRow) Scan(dest ...any) error { return r.c.note(r.Row.Scan(dest...)) }

type sessionTrip struct {
	pgx.BatchResults
	c *session
}

func (t *sessionTrip) Close() error { return t.c.note(t.BatchResults.Close()) }

// willCommit marks that tx's next round trip carries the COMMIT: from then
// on a broken connection's attempt is not run again (its outcome may be
// unknown). tx that is not a session is left alone.
func willCommit(tx querier) {
	if c, ok := tx.(*session); ok {
		c.commitSent = true
	}
}

// queueCommit queues COMMIT on b, the round trip that carries tx's COMMIT,
// marks it so (willCommit), and returns whether the server answered the
// COMMIT: once it did, the transaction committed whatever the round trip
// returns after it (a restart's 57P01 can end the session right after the
// COMMIT ran), and the attempt must not run again.
func queueCommit(tx querier, b *pgx.Batch) *bool {
	committed := new(bool)
	b.Queue("COMMIT").Exec(func(tag pgconn.CommandTag) error {
		// A transaction an earlier statement aborted answers its COMMIT
		// with ROLLBACK, and committed nothing.
		*committed = tag.String() == "COMMIT"
		return nil
	})
	willCommit(tx)
	return committed
}

// notCommitted undoes willCommit when the server answered that the
// transaction failed before its COMMIT ran (a PostgreSQL error, not a lost
// connection): the attempt committed nothing.
func notCommitted(tx querier) {
	if c, ok := tx.(*session); ok {
		c.commitSent = false
	}
}

// inSession runs attempt, one transaction, on a pooled connection and
// releases it. attempt rolls back on its errors and calls willCommit before
// the round trip that carries its COMMIT. When attempt failed with its
// connection closed before that (the connection was dead when handed out,
// or a restart, a failover or pg_terminate_backend ended it mid-way) and
// ctx is still live, nothing was committed: attempt runs again (up to
// brokenRetries times), on a connection the pool has checked (connCheck). An error acquiring a
// connection is queen.ErrUnavailable. A round trip that met a full disk is
// noted (Store.StorageFull); while the disk is known to be full, a lost
// sidecar range (QS001), which cannot be rebuilt until space is freed, is
// answered queen.ErrStorageFull.
func (s *Store) inSession(ctx context.Context, attempt func(*session) error) error {
	for try := 0; ; try++ {
		conn, err := s.pool.Acquire(ctx)
		if err != nil {
			return unavailable(err)
		}
		c := &session{pooled: conn, afterCommit: s.afterCommit}
		err = attempt(c)
		conn.Release()
		if err != nil && brokenConn(err) {
			// The session is gone though no noted round trip saw the
			// connection closed: a FATAL 57P01 answered to a batch's
			// prepare is read by the batch's first result, not its Close.
			c.broken = true
		}
		if c.full || storageFull(err) {
			s.full.mark()
		}
		if c.rangeLost {
			s.rebuildLostRanges()
			if err != nil && s.full.recent() {
				return queen.ErrStorageFull.With("the database is out of disk space: a sidecar range emptied by the database's restart cannot be rebuilt until space is freed; nothing was written, retry with the same transaction ids (%v)", err)
			}
		}
		if err == nil || !c.broken || c.commitSent || ctx.Err() != nil || try >= brokenRetries {
			return err
		}
		s.conns.markBroken()
		s.conns.retried.Add(1)
	}
}

// brokenRetries is how many times an attempt that met a dead connection
// (and committed nothing) runs again: a restart or a failover can end the
// fresh connection of a retry too while the server's sessions are being
// terminated.
const brokenRetries = 3

// retryBroken runs op, a read or an idempotent write on the pool, and again
// (up to brokenRetries times) when it failed because its connection was dead
// (brokenConn) and ctx is still live. op's error is returned as it is.
func (s *Store) retryBroken(ctx context.Context, op func() error) error {
	for try := 0; ; try++ {
		err := op()
		if err == nil || ctx.Err() != nil || !brokenConn(err) || try >= brokenRetries {
			return err
		}
		s.conns.markBroken()
		s.conns.retried.Add(1)
	}
}

// brokenConn reports whether err says the connection it ran on is gone:
// the server ended the session (SQLSTATE 57P01 admin_shutdown, 57P02
// crash_shutdown, class 08 connection exception), the socket failed (EOF,
// reset, broken pipe, closed), or nothing was sent (pgconn.SafeToRetry).
// A context's end and a timeout are not: the statement may still run.
func brokenConn(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err) {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code == "57P01" || pgErr.Code == "57P02" || len(pgErr.Code) == 5 && pgErr.Code[:2] == "08"
	}
	if pgconn.SafeToRetry(err) {
		return true
	}
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNABORTED)
}

// lostRanges runs the on-demand rebuild of the level-0 sidecar ranges a
// database crash or a failover emptied (rebuildLostRanges): one pass at a
// time per Store, stopped by Close.
type lostRanges struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	busy   bool  // a pass is running
	closed bool  // Close ran: no new pass
	passes int64 // passes finished (tests)
}

// lostRangeRebuildTimeout bounds one on-demand rebuild pass.
const lostRangeRebuildTimeout = time.Minute

// rebuildLostRanges starts, unless one is running, a pass that re-fills the
// open level-0 ranges a crash emptied and compacts the closed ones
// (refillLostRanges), so the lookups that fail with QS001 until then (a
// push answers failed, retryable) work again within about one pass instead
// of waiting for the retention leader's next one. Store.Open runs the same
// pass; this one serves a broker whose database failed over or restarted
// under it.
func (s *Store) rebuildLostRanges() {
	l := &s.lost
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.busy || l.closed || l.ctx == nil {
		return
	}
	l.busy = true
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		ctx, cancel := context.WithTimeout(l.ctx, lostRangeRebuildTimeout)
		_, err := refillLostRanges(ctx, s.pool)
		cancel()
		s.full.note(err)
		if err != nil && l.ctx.Err() == nil {
			slog.Warn("persistence: rebuilding sidecar ranges a database restart emptied", "err", err)
		}
		l.mu.Lock()
		l.busy = false
		l.passes++
		l.mu.Unlock()
	}()
}

// lostPasses returns how many rebuild passes have finished.
func (l *lostRanges) lostPasses() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.passes
}

// close stops a running pass and waits for it.
func (l *lostRanges) close() {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	if l.cancel != nil {
		l.cancel()
	}
	l.wg.Wait()
}
