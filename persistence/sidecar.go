package persistence

import (
	"context"
	"time"

	"github.com/google/uuid"
)

var sqlCacheHydrate = q("cache_hydrate")

// SidecarSegment is one log_txns row: the 16-byte hashes of a segment's
// frames in frame order, the first at offset First.
type SidecarSegment struct {
	First     int64
	CreatedAt time.Time
	Hashes    []byte
}

// SidecarRange returns partition pid's sidecar rows for segments starting in
// (after, upTo], stored within the last windowSeconds, in offset order: what
// a hash cache hydrates from (SPEC.md §8).
func (s *Store) SidecarRange(ctx context.Context, pid uuid.UUID, after, upTo, windowSeconds int64) ([]SidecarSegment, error) {
	rows, err := s.pool.Query(ctx, sqlCacheHydrate, pid, after, upTo, windowSeconds)
	if err != nil {
		return nil, unavailable(err)
	}
	defer rows.Close()
	var out []SidecarSegment
	for rows.Next() {
		var sg SidecarSegment
		if err := rows.Scan(&sg.First, &sg.CreatedAt, &sg.Hashes); err != nil {
			return nil, unavailable(err)
		}
		out = append(out, sg)
	}
	return out, unavailable(rows.Err())
}
