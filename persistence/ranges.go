package persistence

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The per-hash sidecar index is kept in time ranges of created_at
// (migrations 0006 and 0011, SPEC.md §2, §7): ranges [lo, lo + span) with lo
// a multiple of the span since the epoch (UTC), listed in
// queen.sidecar_ranges. While a range is open it is level 0, an UNLOGGED
// partition of log_txn_hashes named log_txn_hashes_YYYYMMDD_HHMMSS after lo
// (one per-hash row and index entry per stored message, no WAL); a few
// seconds after it closes the retention leader compacts it into level 1
// (packed blocks of self-contained entries built from its level-0 rows:
// hash, partition, created_at, segment and index, 52 bytes a hash,
// migration 0017), in the level-1 table it continues or one of its own,
// hash_blocks_YYYYMMDD_HHMMSS after the table's first range (migration 0023:
// up to 16 contiguous ranges a table, listed in queen.sidecar_tables, so a
// lookup descends once per table), and drops its level-0 table; once a newer
// table exists it writes the closed table's merged index (migration 0027,
// unlogged: one row per bucket, so a lookup reads one row per closed table). A DEFAULT partition
// (logged) takes a row whose range does not exist (a push never fails for a
// missing range). Every broker creates the ranges covering now through now +
// 2 spans when its store opens and on every retention tick; the retention
// leader drops a range once it is older than every queue's sidecar floor,
// and re-fills from the segments' hashes a level-0 range that a database
// crash emptied (retention keeps those segments until the range is
// compacted). Range DDL waits at most sidecarLockTimeout for the
// parent table's lock, which pushes need too, and is retried on the next
// tick when it could not have it.

var (
	sqlSidecarRangesAhead   = q("sidecar_ranges_ahead")
	sqlSidecarRangeCreate   = q("sidecar_range_create")
	sqlSidecarRangesExpired = q("sidecar_ranges_expired")
	sqlSidecarRangeDrop     = q("sidecar_range_drop")
	sqlSidecarLockTimeout   = q("sidecar_lock_timeout")
	sqlTestAge              = q("test_age")
	sqlTestAgeUnpinned      = q("test_age_unpinned")
	sqlTestAgePin           = q("test_age_pin")
	sqlSidecarCompactable   = q("sidecar_compactable")
	sqlSidecarCompact       = q("sidecar_compact")
	sqlSidecarRefill        = q("sidecar_refill")
	sqlSidecarUnprinted     = q("sidecar_unprinted")
	sqlSidecarPrintsRefill  = q("sidecar_prints_refill")
	sqlSidecarUnmerged      = q("sidecar_unmerged")
	sqlSidecarMerge         = q("sidecar_merge")
)

// DefaultSidecarRange is the time span of one range of the per-hash sidecar
// index (QUEEN_SIDECAR_RANGE): 1 minute. An open range is level 0 (an
// unlogged per-hash row each, about 140 bytes of database a hash until it
// closes, and its btree, one random insert per stored message, stays in
// shared_buffers); a closed one is compacted into level 1 in one statement,
// so a shorter span keeps level 0 small and each compaction short (about
// 0.7 µs of one core per hash). A cold lookup reads, per level-1 table in
// the window (up to 16 closed ranges each), one row of its merged index once
// the table is closed and merged (migration 0027: mergeTables), else one
// row per range; a suspect is looked up only in the ranges its cache
// generations span (queen.Span).
const DefaultSidecarRange = time.Minute

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
	// Compacted is the level-0 ranges compacted into level 1, Hashes the
	// hashes they held; Refilled the level-0 ranges a crash had emptied and
	// that were filled again from the segments' hashes (compactSidecarRanges).
	Compacted int
	Hashes    int64
	Refilled  int
	// Printed is the compacted ranges whose fingerprints (migration 0021)
	// were written again from their level-1 blocks: compacted by a release
	// before 0.4.4, or emptied by a crash or a failover.
	Printed int
	// Merged is the closed level-1 tables whose merged index (migration
	// 0027) was written: newly closed, or emptied by a crash or a
	// failover; MergedHashes the hashes they index.
	Merged       int
	MergedHashes int64
}

// bounds is one sidecar range, [lo, hi).
type bounds struct{ lo, hi time.Time }

func scanBounds(row pgx.CollectableRow) (bounds, error) {
	var b bounds
	return b, row.Scan(&b.lo, &b.hi)
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
	rows, err := db.Query(ctx, sqlSidecarRangesAhead)
	if err != nil {
		return SidecarRanges{}, unavailable(err)
	}
	var now time.Time
	var have []bounds
	var lo, hi *time.Time
	if _, err := pgx.ForEachRow(rows, []any{&now, &lo, &hi}, func() error {
		if lo != nil && hi != nil {
			have = append(have, bounds{*lo, *hi})
		}
		return nil
	}); err != nil {
		return SidecarRanges{}, unavailable(err)
	}
	// Three cells of the span: the one holding now and the next two.
	first := now.Truncate(span)
	return createRanges(ctx, db, "sidecar", sqlSidecarRangeCreate, planRanges(have, now, first.Add(3*span), span, span))
}

// planRanges is the one planner of both time-range schemes, segments_timed
// (segments of queues with retentionSeconds) and the sidecar's
// log_txn_hashes: it returns the ranges [lo, hi) to create so that
// [from, to) is covered, given the existing ones. Cells of the span,
// aligned on the epoch, where they are free; where an existing range of
// another span is in the way, the largest free aligned cells of a
// power-of-two fraction of the span down to unit; where even a unit cell is
// in the way (an existing range not aligned on unit), a range short of it;
// where the free time starts off the unit's alignment (the end of a range
// of an older span), a short range up to the next aligned boundary.
// from is rounded down to unit; span and unit are whole seconds, span at
// least unit. Segment ranges plan with unit one minute (their spans are
// powers of two of minutes, so cells nest or are disjoint), the sidecar's
// with unit its span (every range one cell; after a change of span one
// short range bridges from where the old ranges end to the new alignment,
// instead of cells that overlap them).
func planRanges(existing []bounds, from, to time.Time, span, unit time.Duration) []bounds {
	if span < unit {
		span = unit
	}
	existing = append([]bounds(nil), existing...)
	unix := func(t time.Time) int64 { return t.Unix() }
	covering := func(t int64) (int64, bool) {
		for _, r := range existing {
			if unix(r.lo) <= t && t < unix(r.hi) {
				return unix(r.hi), true
			}
		}
		return 0, false
	}
	overlaps := func(lo, hi int64) bool {
		for _, r := range existing {
			if unix(r.lo) < hi && lo < unix(r.hi) {
				return true
			}
		}
		return false
	}
	var out []bounds
	u := int64(unit / time.Second)
	t := unix(from) / u * u
	end := unix(to)
	for t < end {
		if next, ok := covering(t); ok {
			t = next
			continue
		}
		s := int64(span / time.Second)
		for s > u && (t%s != 0 || overlaps(t, t+s)) {
			s /= 2
		}
		hi := t + s
		if t%s != 0 { // not aligned even on unit: a short range to the next boundary
			hi = (t/s + 1) * s
		}
		for _, r := range existing { // an odd range (not aligned on unit) in the way: stop short of it
			if lo := unix(r.lo); lo > t && lo < hi {
				hi = lo
			}
		}
		s = hi - t
		out = append(out, bounds{time.Unix(t, 0).UTC(), time.Unix(t+s, 0).UTC()})
		existing = append(existing, bounds{time.Unix(t, 0), time.Unix(t+s, 0)})
		t += s
	}
	return out
}

// createRanges runs create (sidecar_range_create or segment_range_create:
// $1 lo, $2 hi, true when it created the range) for each range of want,
// each in its own transaction under the range DDL's lock timeout
// (rangeDDL), and counts them: Created, or Deferred when the table's lock
// was not granted in time (the next pass retries). what names the ranges in
// errors, which are database errors (queen.ErrUnavailable).
func createRanges(ctx context.Context, db txBeginner, what, create string, want []bounds) (SidecarRanges, error) {
	var r SidecarRanges
	for _, b := range want {
		var created bool
		err := rangeDDL(ctx, db, func(tx pgx.Tx) error {
			return tx.QueryRow(ctx, create, b.lo, b.hi).Scan(&created)
		})
		switch {
		case err == nil:
			if created {
				r.Created++
			}
		case deferrable(err):
			r.Deferred++
		default:
			return r, unavailable(fmt.Errorf("create %s range from %v: %w", what, b.lo.UTC(), err))
		}
	}
	return r, nil
}

// dropSidecarRanges drops the ranges none of whose rows counts any more:
// older than the largest sidecar floor over all queues (floorSeconds at
// least): entries are self-contained (migration 0017). The retention leader
// only.
func dropSidecarRanges(ctx context.Context, db txBeginner, floorSeconds float64) (SidecarRanges, error) {
	var r SidecarRanges
	rows, err := db.Query(ctx, sqlSidecarRangesExpired, pgx.QueryExecModeExec, floorSeconds, sidecarDropsPerPass)
	if err != nil {
		return r, unavailable(err)
	}
	expired, err := pgx.CollectRows(rows, scanBounds)
	if err != nil {
		return r, unavailable(err)
	}
	for _, x := range expired {
		var dropped bool
		err := rangeDDL(ctx, db, func(tx pgx.Tx) error {
			return tx.QueryRow(ctx, sqlSidecarRangeDrop, x.lo, x.hi).Scan(&dropped)
		})
		switch {
		case err == nil:
			if dropped {
				r.Dropped++
			}
		case deferrable(err):
			r.Deferred++
		default:
			return r, unavailable(fmt.Errorf("drop sidecar range from %v: %w", x.lo.UTC(), err))
		}
	}
	return r, nil
}

// compactGrace is how long after its upper bound a level-0 range is
// compacted: pushes stamped just before it have committed by then (a
// straggler is waited for, or fails and is retried: sidecar_compact).
const compactGrace = 5 * time.Second

// lostLockTimeout is the lock wait of a compaction that rebuilds a range a
// crash emptied: lookups that need it fail until it is done, so it waits
// longer for log_txn_hashes' lock than routine range DDL.
const lostLockTimeout = 2 * time.Second

// compactSidecarRanges moves the closed level-0 ranges of the per-hash
// sidecar index into level 1 (migration 0011: unlogged per-hash rows while
// a range is open, packed hash blocks once it is closed) and re-fills the
// open ranges a database crash emptied; a range is closed grace after its
// upper bound (compactGrace). The retention leader only; each
// range in its own transaction. A compaction that could not have its locks
// in time is counted Deferred and retried on the next pass.
func compactSidecarRanges(ctx context.Context, db txBeginner, grace time.Duration) (SidecarRanges, error) {
	return sidecarUpkeep(ctx, db, grace, false)
}

// refillLostRanges rebuilds only the level-0 ranges a crash emptied (see
// compactSidecarRanges): the open ones re-filled, the closed ones compacted.
func refillLostRanges(ctx context.Context, db txBeginner) (SidecarRanges, error) {
	return sidecarUpkeep(ctx, db, compactGrace, true)
}

func sidecarUpkeep(ctx context.Context, db txBeginner, grace time.Duration, lostOnly bool) (SidecarRanges, error) {
	var r SidecarRanges
	rows, err := db.Query(ctx, sqlSidecarCompactable, pgx.QueryExecModeExec, grace.Seconds())
	if err != nil {
		return r, unavailable(err)
	}
	type work struct {
		bounds
		closed, lost bool
	}
	todo, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (work, error) {
		var w work
		return w, row.Scan(&w.lo, &w.hi, &w.closed, &w.lost)
	})
	if err != nil {
		return r, unavailable(err)
	}
	for _, w := range todo {
		if lostOnly && !w.lost {
			continue
		}
		var n int64
		var err error
		if w.closed {
			wait := sidecarLockTimeout
			if w.lost {
				wait = lostLockTimeout
			}
			err = lockedDDL(ctx, db, wait, func(tx pgx.Tx) error {
				return tx.QueryRow(ctx, sqlSidecarCompact, w.lo, w.hi).Scan(&n)
			})
		} else {
			err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
				return tx.QueryRow(ctx, sqlSidecarRefill, w.lo, w.hi).Scan(&n)
			})
		}
		switch {
		case err == nil && w.closed:
			if n >= 0 {
				r.Compacted++
				r.Hashes += n
			}
		case err == nil:
			r.Refilled++
		case deferrable(err):
			r.Deferred++
		default:
			return r, unavailable(fmt.Errorf("compact sidecar range from %v: %w", w.lo.UTC(), err))
		}
	}
	if lostOnly {
		return r, nil
	}
	if err := printRanges(ctx, db, &r); err != nil {
		return r, err
	}
	return r, mergeTables(ctx, db, &r)
}

// mergeStepHashes is about how many hashes one step of a merge indexes, in
// its own transaction (about 1.7 µs of one core a hash: about 2 s).
const mergeStepHashes = 1 << 20

// mergeTablesPerPass bounds the tables one upkeep pass lists to merge.
const mergeTablesPerPass = 4

// mergePassBudget bounds the time one upkeep pass spends merging; the next
// pass goes on where it stopped. A table closes every quarter of the window
// at most (15 minutes for an hour), so the passes keep up.
const mergePassBudget = 10 * time.Second

// mergeTables writes the merged index (sidecar_merge, migration 0027) of
// the closed level-1 tables that lack it, the newest first, a step of about
// mergeStepHashes at a time, each in its own transaction under
// sidecarLockTimeout, for at most mergePassBudget; it counts in r.Merged
// the indexes it completed and in r.MergedHashes the hashes it indexed
// (r.Deferred when a lock was busy: the next pass tries again).
func mergeTables(ctx context.Context, db txBeginner, r *SidecarRanges) error {
	rows, err := db.Query(ctx, sqlSidecarUnmerged, pgx.QueryExecModeExec, mergeTablesPerPass)
	if err != nil {
		return unavailable(err)
	}
	wides, err := pgx.CollectRows(rows, pgx.RowTo[time.Time])
	if err != nil {
		return unavailable(err)
	}
	began := time.Now()
	for _, w := range wides {
		for time.Since(began) < mergePassBudget {
			var n int64
			var complete, did bool
			err := rangeDDL(ctx, db, func(tx pgx.Tx) error {
				rows, err := tx.Query(ctx, sqlSidecarMerge, w, int64(mergeStepHashes))
				if err != nil {
					return err
				}
				defer rows.Close()
				for rows.Next() {
					did = true
					if err := rows.Scan(&n, &complete); err != nil {
						return err
					}
				}
				return rows.Err()
			})
			switch {
			case err == nil:
			case deferrable(err):
				r.Deferred++
				return nil
			default:
				return unavailable(fmt.Errorf("merge level-1 table from %v: %w", w.UTC(), err))
			}
			if !did {
				break // nothing to do: gone, not closed, or complete
			}
			r.MergedHashes += n
			if complete {
				r.Merged++
				break
			}
		}
	}
	return nil
}

// printsPerPass bounds the ranges whose fingerprints one upkeep pass writes
// again (each reads the range's level-1 blocks: about a second per million
// hashes), so a pass after an upgrade or a crash stays short.
const printsPerPass = 4

// printRanges writes the fingerprints of the compacted ranges that lack
// them (sidecar_prints_refill), the newest first, at most printsPerPass,
// each in its own transaction, counting them in r.Printed.
func printRanges(ctx context.Context, db txBeginner, r *SidecarRanges) error {
	rows, err := db.Query(ctx, sqlSidecarUnprinted, pgx.QueryExecModeExec, printsPerPass)
	if err != nil {
		return unavailable(err)
	}
	los, err := pgx.CollectRows(rows, pgx.RowTo[time.Time])
	if err != nil {
		return unavailable(err)
	}
	for _, lo := range los {
		var n int64
		err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
			return tx.QueryRow(ctx, sqlSidecarPrintsRefill, lo).Scan(&n)
		})
		switch {
		case err == nil && n >= 0:
			r.Printed++
		case err == nil:
		default:
			return unavailable(fmt.Errorf("fingerprints of sidecar range from %v: %w", lo.UTC(), err))
		}
	}
	return nil
}

// rangeDDL runs fn in a transaction whose lock_timeout is
// sidecarLockTimeout.
func rangeDDL(ctx context.Context, db txBeginner, fn func(pgx.Tx) error) error {
	return lockedDDL(ctx, db, sidecarLockTimeout, fn)
}

// lockedDDL runs fn in a transaction whose lock_timeout is wait.
func lockedDDL(ctx context.Context, db txBeginner, wait time.Duration, fn func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		var set string
		if err := tx.QueryRow(ctx, sqlSidecarLockTimeout, wait.Milliseconds()).Scan(&set); err != nil {
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
