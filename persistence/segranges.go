package persistence

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Segments of queues with retentionSeconds live in time ranges of
// segments_timed (migration 0010, SPEC.md §7): [lo, lo + span) with span a
// power of two of minutes (1 to 1024) and lo a multiple of it since the
// epoch (UTC), named segments_YYYYMMDD_HHMM_<span>m after lo and listed
// in queen.segment_ranges. There is no DEFAULT partition: a segment written
// while no range holds its time goes to segments_kept (bundle_stamp). New
// ranges take the span of the longest retention in use (about an eighth
// of it), so the retained time spans 8 to 16 ranges. Every broker creates
// the ranges covering now through the lead (segmentLead) when its store
// opens, on every retention tick and after a configure that gives a queue
// a retention, attaching each under a lock pushes do not wait for; the
// retention leader drops a range once every row in it is past its queue's
// retention (checked on the queues' current options, under a lock on the
// range). Range DDL waits at most sidecarLockTimeout for the tables' locks
// and is retried on the next tick when busy.

var (
	sqlSegmentRanges             = q("segment_ranges")
	sqlSegmentRangeClock         = q("segment_range_clock")
	sqlSegmentRangeCreate        = q("segment_range_create")
	sqlSegmentRangeDrop          = q("segment_range_drop")
	sqlSegmentRangeKeepers       = q("segment_range_keepers")
	sqlSegmentRangeDetach        = q("segment_range_detach")
	sqlSegmentRangeFloor         = q("segment_range_floor")
	sqlSegmentRangeFinalize      = q("segment_range_finalize")
	sqlSegmentRangePending       = q("segment_range_pending")
	sqlSessionLockTimeout        = q("session_lock_timeout")
	sqlSessionLockTimeoutRead    = q("session_lock_timeout_read")
	sqlSessionLockTimeoutRestore = q("session_lock_timeout_restore")
)

// segmentLead is how far ahead of now ranges are made for a span: four
// spans and at least 5 minutes, plus the span, so a range exists long
// before its time even when several ticks in a row find the table busy.
func segmentLead(span time.Duration) time.Duration {
	return max(4*span, 5*time.Minute) + span
}

// segmentDropsPerPass bounds the segment ranges one retention pass drops.
const segmentDropsPerPass = 100

// segRange is one time range of segments_timed.
type segRange struct {
	name   string
	lo, hi time.Time
}

// segmentClock is what range maintenance reads from the queues.
type segmentClock struct {
	now      time.Time
	span     time.Duration // of new ranges; 0 when no queue has a retention
	shortest time.Duration // the shortest retention in use
}

func readSegmentRanges(ctx context.Context, db txBeginner) ([]segRange, segmentClock, error) {
	var c segmentClock
	rows, err := db.Query(ctx, sqlSegmentRangeClock)
	if err != nil {
		return nil, c, unavailable(err)
	}
	cs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (segmentClock, error) {
		var x segmentClock
		var span int32
		var shortest float64
		var any bool
		if err := row.Scan(&x.now, &span, &shortest, &any); err != nil {
			return x, err
		}
		if any {
			x.span = time.Duration(span) * time.Minute
			x.shortest = time.Duration(shortest * float64(time.Second))
		}
		return x, nil
	})
	if err != nil {
		return nil, c, unavailable(err)
	}
	if len(cs) == 1 {
		c = cs[0]
	}
	rows, err = db.Query(ctx, sqlSegmentRanges)
	if err != nil {
		return nil, c, unavailable(err)
	}
	rs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (segRange, error) {
		var r segRange
		return r, row.Scan(&r.name, &r.lo, &r.hi)
	})
	if err != nil {
		return nil, c, unavailable(err)
	}
	return rs, c, nil
}

// EnsureSegmentRanges creates the time ranges of segments_timed covering
// now through the lead (four spans, at least 5 minutes, plus one) on
// PostgreSQL's clock, with the span of the longest retentionSeconds in use
// (none when no queue has a retention). Idempotent and safe when several
// brokers run it at once. A range whose DDL could not have the table's
// lock within 200 ms is counted Deferred, not an error. Errors are
// database errors (queen.ErrUnavailable).
func (s *Store) EnsureSegmentRanges(ctx context.Context) (SidecarRanges, error) {
	return ensureSegmentRanges(ctx, s.pool)
}

func ensureSegmentRanges(ctx context.Context, db txBeginner) (SidecarRanges, error) {
	existing, c, err := readSegmentRanges(ctx, db)
	if err != nil || c.span == 0 {
		return SidecarRanges{}, err
	}
	have := make([]bounds, len(existing))
	for i, x := range existing {
		have[i] = bounds{x.lo, x.hi}
	}
	return createRanges(ctx, db, "segment", sqlSegmentRangeCreate, planRanges(have, c.now, c.now.Add(segmentLead(c.span)), c.span, time.Minute))
}

// segmentDetachLockTimeout bounds a concurrent detach's waits: for the
// parent's SHARE UPDATE EXCLUSIVE lock (which pushes and reads never
// hold) and for the transactions that may still read the range. Waiting
// blocks no push or read.
const segmentDetachLockTimeout = 10 * time.Second

// dropSegmentRanges drops the ranges of segments_timed every row of which
// is past its queue's retention now. Only ranges whose upper bound is at
// least the shortest retention in the past are tried; each is checked
// (queen.segment_range_keepers), detached with DETACH PARTITION ...
// CONCURRENTLY (pushes and reads go on: a DROP of a partition would wait
// for, and then block, every transaction that reads segments), checked
// again and dropped, or attached back if a configure raised a retention
// meanwhile. A detach interrupted earlier is finalized first. The
// retention leader only.
func dropSegmentRanges(ctx context.Context, db txBeginner) (SidecarRanges, error) {
	var r SidecarRanges
	var conn *pgx.Conn
	switch d := db.(type) {
	case *pgx.Conn:
		conn = d
	case *pgxpool.Pool:
		c, err := d.Acquire(ctx)
		if err != nil {
			return r, unavailable(err)
		}
		defer c.Release()
		conn = c.Conn()
	default:
		return r, fmt.Errorf("persistence: drop segment ranges on %T", db)
	}
	existing, c, err := readSegmentRanges(ctx, conn)
	if err != nil {
		return r, err
	}
	var pending map[string]bool
	rows, err := conn.Query(ctx, sqlSegmentRangePending)
	if err != nil {
		return r, unavailable(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return r, unavailable(err)
	}
	for _, n := range names {
		if pending == nil {
			pending = map[string]bool{}
		}
		pending[n] = true
	}
	tried := 0
	for _, x := range existing {
		if !pending[x.name] && (x.hi.After(c.now.Add(-c.shortest)) || tried == segmentDropsPerPass) {
			continue
		}
		tried++
		if !pending[x.name] {
			var keepers int64
			if err := conn.QueryRow(ctx, sqlSegmentRangeKeepers, x.name, x.hi).Scan(&keepers); err != nil {
				return r, unavailable(fmt.Errorf("segment range %s: %w", x.name, err))
			}
			if keepers > 0 {
				continue
			}
		}
		detach := sqlSegmentRangeDetach
		if pending[x.name] {
			// Its floors were raised before the detach began.
			detach = sqlSegmentRangeFinalize
		} else if _, err := conn.Exec(ctx, strings.ReplaceAll(sqlSegmentRangeFloor, "{{range}}", pgx.Identifier{"queen", x.name}.Sanitize())); err != nil {
			if deferrable(err) || isUndefinedTable(err) {
				r.Deferred++
				continue
			}
			return r, unavailable(fmt.Errorf("floors of segment range %s: %w", x.name, err))
		}
		if err := detachSegmentRange(ctx, conn, x.name, detach); err != nil {
			if deferrable(err) || isUndefinedTable(err) {
				r.Deferred++
				continue
			}
			return r, unavailable(fmt.Errorf("detach segment range %s: %w", x.name, err))
		}
		var dropped bool
		err := rangeDDL(ctx, conn, func(tx pgx.Tx) error {
			return tx.QueryRow(ctx, sqlSegmentRangeDrop, x.name, x.lo, x.hi).Scan(&dropped)
		})
		switch {
		case err == nil:
			if dropped {
				r.Dropped++
			}
		case deferrable(err):
			r.Deferred++
		default:
			return r, unavailable(fmt.Errorf("drop segment range %s: %w", x.name, err))
		}
	}
	return r, nil
}

// detachSegmentRange runs detach (segment_range_detach or
// segment_range_finalize) for range name on conn, outside a transaction,
// with the session's lock_timeout at segmentDetachLockTimeout for the
// statement (restored after).
func detachSegmentRange(ctx context.Context, conn *pgx.Conn, name, detach string) error {
	var was string
	if err := conn.QueryRow(ctx, sqlSessionLockTimeoutRead).Scan(&was); err != nil {
		return err
	}
	var set string
	if err := conn.QueryRow(ctx, sqlSessionLockTimeout, segmentDetachLockTimeout.Milliseconds()).Scan(&set); err != nil {
		return err
	}
	ident := pgx.Identifier{"queen", name}.Sanitize()
	_, err := conn.Exec(ctx, strings.ReplaceAll(detach, "{{range}}", ident))
	if _, rerr := conn.Exec(ctx, sqlSessionLockTimeoutRestore, was); rerr != nil && err == nil {
		err = rerr
	}
	return err
}

// isUndefinedTable reports a range that is gone (dropped by another pass).
func isUndefinedTable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "42P01"
}
