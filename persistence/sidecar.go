package persistence

import (
	"context"
	"time"

	"github.com/google/uuid"

	queen "github.com/queen-mq/queen-go"
)

var sqlCacheHydrate = q("cache_hydrate")

// SidecarRange returns the transaction-id hashes of partition pid's segments
// starting in (after, upTo], stored within the last windowSeconds, in offset
// order: what a hash cache hydrates from (SPEC.md §8). The hashes live in
// the segments (migration 0017), so segments that retention removed inside
// the window cannot be read back: where such a hole is (offsets allocated
// below a segment returned, or up to upTo, whose segment is gone), a
// SidecarSegment with Gone set stands for it, its CreatedAt the time at or
// before which the hole's hashes were stored (zero: not known, as late as
// the newest commit). Errors are database errors (queen.ErrUnavailable).
func (s *Store) SidecarRange(ctx context.Context, pid uuid.UUID, after, upTo, windowSeconds int64) ([]queen.SidecarSegment, error) {
	rows, err := s.pool.Query(ctx, sqlCacheHydrate, pid, after, upTo, windowSeconds)
	if err != nil {
		return nil, unavailable(err)
	}
	defer rows.Close()
	var (
		out      []queen.SidecarSegment
		lasts    []int64
		edge     bool
		edgeLast int64
	)
	for rows.Next() {
		var sg queen.SidecarSegment
		var last int64
		var isEdge bool
		if err := rows.Scan(&sg.First, &last, &sg.CreatedAt, &sg.Hashes, &isEdge); err != nil {
			return nil, unavailable(err)
		}
		if isEdge {
			edge, edgeLast = true, last
			continue
		}
		out = append(out, sg)
		lasts = append(lasts, last)
	}
	if err := rows.Err(); err != nil {
		return nil, unavailable(err)
	}
	return withHoles(out, lasts, edge, edgeLast, upTo), nil
}

// withHoles puts a Gone marker before each segment of segs (in offset
// order, lasts their last offsets) that does not follow on from the one
// below it, and, when segs is empty, one for a range ending at upTo whose
// last offsets have no segment. hasEdge, edgeLast describe the segment just
// below segs[0] (or the last one starting at or before upTo when segs is
// empty), as cache_hydrate returns it.
func withHoles(segs []queen.SidecarSegment, lasts []int64, hasEdge bool, edgeLast, upTo int64) []queen.SidecarSegment {
	gone := func(t time.Time) queen.SidecarSegment { return queen.SidecarSegment{Gone: true, CreatedAt: t} }
	if len(segs) == 0 {
		if upTo >= 0 && (!hasEdge || edgeLast < upTo) {
			return []queen.SidecarSegment{gone(time.Time{})}
		}
		return nil
	}
	out := make([]queen.SidecarSegment, 0, len(segs)+1)
	below := int64(-1) // the last offset the segment below segs[0] ends at
	if hasEdge {
		below = edgeLast
	}
	for i, sg := range segs {
		if i > 0 {
			below = lasts[i-1]
		}
		if sg.First != below+1 {
			out = append(out, gone(sg.CreatedAt))
		}
		out = append(out, sg)
	}
	return out
}

var sqlCachePrints = q("cache_prints")

// SidecarPrints returns partition pid's fingerprints of the sidecar ranges
// inside the last windowSeconds (migration 0021): what a hash cache reads
// back for the segments retention removed inside the window, whose hashes
// SidecarRange cannot return (SPEC.md §8). Uncovered is the lo of the
// oldest range in the window whose fingerprints are not complete (not
// compacted yet, compacted by a release before 0.4.4, or emptied by a
// crash; zero when every one is): each hash the partition stored inside
// the window before Uncovered has its fingerprint in Sets. Errors are
// database errors (queen.ErrUnavailable).
func (s *Store) SidecarPrints(ctx context.Context, pid uuid.UUID, windowSeconds int64) (queen.SidecarPrints, error) {
	rows, err := s.pool.Query(ctx, sqlCachePrints, pid, windowSeconds)
	if err != nil {
		return queen.SidecarPrints{}, unavailable(err)
	}
	defer rows.Close()
	var out queen.SidecarPrints
	for rows.Next() {
		var (
			set      queen.PrintSet
			complete bool
		)
		if err := rows.Scan(&set.Since, &set.Until, &complete, &set.Prints); err != nil {
			return queen.SidecarPrints{}, unavailable(err)
		}
		switch {
		case !complete:
			if out.Uncovered.IsZero() || set.Since.Before(out.Uncovered) {
				out.Uncovered = set.Since
			}
		case complete && len(set.Prints) >= 4:
			out.Sets = append(out.Sets, set)
		}
	}
	if err := rows.Err(); err != nil {
		return queen.SidecarPrints{}, unavailable(err)
	}
	return out, nil
}
