package persistence

import (
	"context"

	"github.com/google/uuid"

	queen "github.com/queen-mq/queen-go"
)

var sqlCacheHydrate = q("cache_hydrate")

// SidecarRange returns partition pid's sidecar rows for segments starting in
// (after, upTo], stored within the last windowSeconds, in offset order: what
// a hash cache hydrates from (SPEC.md §8).
func (s *Store) SidecarRange(ctx context.Context, pid uuid.UUID, after, upTo, windowSeconds int64) ([]queen.SidecarSegment, error) {
	rows, err := s.pool.Query(ctx, sqlCacheHydrate, pid, after, upTo, windowSeconds)
	if err != nil {
		return nil, unavailable(err)
	}
	defer rows.Close()
	var out []queen.SidecarSegment
	for rows.Next() {
		var sg queen.SidecarSegment
		if err := rows.Scan(&sg.First, &sg.CreatedAt, &sg.Hashes); err != nil {
			return nil, unavailable(err)
		}
		out = append(out, sg)
	}
	return out, unavailable(rows.Err())
}
