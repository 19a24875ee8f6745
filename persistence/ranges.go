package persistence

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The per-hash sidecar index (log_txn_hashes) is range-partitioned on
// created_at (migration 0006, SPEC.md §7): ranges [lo, lo + span) with lo a
// multiple of the span since the epoch (UTC), named
// log_txn_hashes_YYYYMMDD_HHMMSS after lo, plus a DEFAULT partition that
// takes a row whose range does not exist (a push never fails for a missing
// range). Every broker creates the ranges covering now through now + 2
// spans when its store opens and on every retention tick; the retention
// leader drops a range once none of its rows counts any more (its log_txns
// rows are purged). Range DDL waits at most sidecarLockTimeout for the
// parent table's lock, which pushes need too, and is retried on the next
// tick when it could not have it.

var (
	sqlSidecarRangeStarts   = q("sidecar_range_starts")
	sqlSidecarRangeCreate   = q("sidecar_range_create")
	sqlSidecarRangesExpired = q("sidecar_ranges_expired")
	sqlSidecarRangeDrop     = q("sidecar_range_drop")
	sqlSidecarLockTimeout   = q("sidecar_lock_timeout")
	sqlRetentionDefault     = q("retention_default")
)

// DefaultSidecarRange is the time span of one range of the per-hash sidecar
// index (QUEEN_SIDECAR_RANGE): 2 minutes, so the current range's btree (one
// random insert per stored message, about 5 million entries of 28 bytes at
// 40,000 messages/s) stays within shared_buffers; a suspect is looked up
// only in the ranges its cache generations span (persistence.Span).
const DefaultSidecarRange = 2 * time.Minute

// Bounds of a sidecar range span: whole seconds from 1 s to 24 h.
const (
	MinSidecarRange = time.Second
	MaxSidecarRange = 24 * time.Hour
)

// sidecarLockTimeout bounds how long a range DDL (create or drop) waits for
// the lock on log_txn_hashes: pushes asking for that lock meanwhile queue
// behind it, so a busy table makes the DDL give up rather than stall them.
const sidecarLockTimeout = 200 * time.Millisecond

// sidecarDropsPerPass bounds the ranges one retention pass drops.
const sidecarDropsPerPass = 100

// CheckSidecarRange validates a range span: whole seconds, 1 s to 24 h.
func CheckSidecarRange(span time.Duration) error {
	if span < MinSidecarRange || span > MaxSidecarRange || span%time.Second != 0 {
		return fmt.Errorf("sidecar range %v: want whole seconds from 1s to 24h, for example 5m", span)
	}
	return nil
}

// txBeginner is what range DDL runs on: the pool, or the retention loop's
// connection.
type txBeginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// SidecarRanges is what one round of range maintenance did.
type SidecarRanges struct {
	// Created is the ranges created.
	Created int
	// Deferred is the range DDL statements that gave up on the lock (or met
	// a range of another span, or rows of the range already in the DEFAULT
	// partition); retried on the next round.
	Deferred int
	// Dropped is the ranges dropped (EnsureSidecarRanges drops none).
	Dropped int
}

// EnsureSidecarRanges creates the ranges of the per-hash sidecar index
// covering now through now + 2 spans on PostgreSQL's clock (three ranges
// of the store's span, Config.SidecarRange). Idempotent and safe when
// several brokers run it at once (a range created meanwhile is skipped).
// A range whose DDL could not have the table's lock within 200 ms is
// counted Deferred, not an error: rows of a missing range go to the DEFAULT
// partition. Errors are database errors (queen.ErrUnavailable).
func (s *Store) EnsureSidecarRanges(ctx context.Context) (SidecarRanges, error) {
	return ensureSidecarRanges(ctx, s.pool, s.span)
}

func ensureSidecarRanges(ctx context.Context, db txBeginner, span time.Duration) (SidecarRanges, error) {
	var r SidecarRanges
	rows, err := db.Query(ctx, sqlSidecarRangeStarts, int64(span/time.Second))
	if err != nil {
		return r, unavailable(err)
	}
	type bounds struct{ lo, hi time.Time }
	want, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (bounds, error) {
		var b bounds
		return b, row.Scan(&b.lo, &b.hi)
	})
	if err != nil {
		return r, unavailable(err)
	}
	for _, b := range want {
		var created bool
		err := rangeDDL(ctx, db, func(tx pgx.Tx) error {
			return tx.QueryRow(ctx, sqlSidecarRangeCreate, b.lo, b.hi).Scan(&created)
		})
		switch {
		case err == nil:
			if created {
				r.Created++
			}
		case deferrable(err):
			r.Deferred++
		default:
			return r, unavailable(fmt.Errorf("create sidecar range from %v: %w", b.lo.UTC(), err))
		}
	}
	return r, nil
}

// dropSidecarRanges drops the ranges none of whose rows counts any more:
// older than the largest sidecar floor over all queues (floorSeconds at
// least) with no log_txns row older than their upper bound. The retention
// leader only.
func dropSidecarRanges(ctx context.Context, db txBeginner, floorSeconds float64) (SidecarRanges, error) {
	var r SidecarRanges
	rows, err := db.Query(ctx, sqlSidecarRangesExpired, pgx.QueryExecModeExec, floorSeconds, sidecarDropsPerPass)
	if err != nil {
		return r, unavailable(err)
	}
	type rng struct {
		name string
		hi   time.Time
	}
	expired, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (rng, error) {
		var x rng
		return x, row.Scan(&x.name, &x.hi)
	})
	if err != nil {
		return r, unavailable(err)
	}
	for _, x := range expired {
		var dropped bool
		err := rangeDDL(ctx, db, func(tx pgx.Tx) error {
			return tx.QueryRow(ctx, sqlSidecarRangeDrop, x.name, x.hi).Scan(&dropped)
		})
		switch {
		case err == nil:
			if dropped {
				r.Dropped++
			}
		case deferrable(err):
			r.Deferred++
		default:
			return r, unavailable(fmt.Errorf("drop sidecar range %s: %w", x.name, err))
		}
	}
	return r, nil
}

// rangeDDL runs fn in a transaction whose lock_timeout is
// sidecarLockTimeout.
func rangeDDL(ctx context.Context, db txBeginner, fn func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		var set string
		if err := tx.QueryRow(ctx, sqlSidecarLockTimeout, sidecarLockTimeout.Milliseconds()).Scan(&set); err != nil {
			return err
		}
		return fn(tx)
	})
}

// deferrable reports whether a range DDL failed for a reason the next round
// may not meet: the lock was busy (lock_not_available), another broker
// created the same range at the same moment (duplicate_table,
// unique_violation), a range of another span overlaps it
// (invalid_object_definition), the DEFAULT partition already holds rows of
// it (check_violation), or a range to drop is in use again
// (object_in_use).
func deferrable(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return false
	}
	switch pe.Code {
	case "55P03", "42P07", "23505", "42P17", "23514", "55006":
		return true
	}
	return false
}
