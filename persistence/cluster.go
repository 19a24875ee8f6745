package persistence

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	queen "github.com/queen-mq/queen-go"
)

// Shard ownership (SPEC.md §9): the fixed shard count, broker heartbeats and
// expiring shard leases, all on PostgreSQL's clock. shards.Membership drives
// them; nothing here decides a verdict.

var (
	sqlClusterInit    = q("cluster_init")
	sqlClusterClaim   = q("cluster_claim")
	sqlClusterRelease = q("cluster_release")
	sqlClusterBrokers = q("cluster_brokers")
	sqlClusterLeases  = q("cluster_leases")
)

// InitCluster creates the cluster with shardCount shards (1 to 65536) the
// first time any broker starts on this database, and returns the stored
// count, which later starts never change.
func (s *Store) InitCluster(ctx context.Context, shardCount int) (int, error) {
	if shardCount < 1 || shardCount > 65536 {
		return 0, queen.ErrInvalidOption.With("shard count %d: want 1 to 65536", shardCount)
	}
	// A broker creating the row at the same moment hides it from this
	// statement's snapshot (no row): run it again.
	for attempt := 0; attempt < 5; attempt++ {
		var n int32
		err := s.pool.QueryRow(ctx, sqlClusterInit, shardCount).Scan(&n)
		if err == nil {
			return int(n), nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return 0, unavailable(err)
		}
	}
	return 0, queen.ErrUnavailable.With("the cluster row could not be created or read")
}

// ClaimShards is one renew tick of broker id, in one statement: it
// heartbeats the broker (live for lease, advertising httpURL and build in
// queen.brokers: build.Layout is the generation a layout migration checks,
// SPEC.md §2), renews its leases up to its fair share ceil(shards / live
// brokers), releases the surplus and claims free or expired shards up to
// that share. It returns the shards the broker holds afterwards, in order,
// and which of them were newly claimed. Errors are queen.ErrUnavailable.
func (s *Store) ClaimShards(ctx context.Context, id uuid.UUID, httpURL string, build queen.Build, lease time.Duration) (held []int, taken []int, err error) {
	rows, err := s.pool.Query(ctx, sqlClusterClaim, id, httpURL, lease.Milliseconds(),
		build.Release, build.Revision, build.Schema, build.Layout)
	if err != nil {
		return nil, nil, unavailable(err)
	}
	defer rows.Close()
	for rows.Next() {
		var shard int32
		var isNew bool
		if err := rows.Scan(&shard, &isNew); err != nil {
			return nil, nil, unavailable(err)
		}
		held = append(held, int(shard))
		if isNew {
			taken = append(taken, int(shard))
		}
	}
	if err := rows.Err(); err != nil {
		return nil, nil, unavailable(err)
	}
	return held, taken, nil
}

// ReleaseShards gives up every lease of broker id and removes its row (a
// clean shutdown), so other brokers claim its shards on their next tick. It
// returns how many leases it gave up.
func (s *Store) ReleaseShards(ctx context.Context, id uuid.UUID) (int, error) {
	var n int64
	if err := s.pool.QueryRow(ctx, sqlClusterRelease, id).Scan(&n); err != nil {
		return 0, unavailable(err)
	}
	return int(n), nil
}

// ClusterState reads the brokers and every shard lease in one round trip.
// Self and LeaseSeconds are left for the caller.
func (s *Store) ClusterState(ctx context.Context) (queen.ClusterView, error) {
	v := queen.ClusterView{Brokers: []queen.ClusterNode{}, Shards: []queen.ShardLease{}}
	b := &pgx.Batch{}
	b.Queue(sqlClusterBrokers).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var n queen.ClusterNode
			var id uuid.UUID
			var shards, schema, layout int32
			if err := rows.Scan(&id, &n.HTTPURL, &n.StartedAt, &n.HeartbeatAt, &n.ExpiresAt, &n.Live, &shards,
				&n.Release, &n.Revision, &schema, &layout); err != nil {
				return err
			}
			n.ID, n.Shards, n.Schema, n.Layout = id.String(), int(shards), int(schema), int(layout)
			v.Brokers = append(v.Brokers, n)
		}
		return rows.Err()
	})
	b.Queue(sqlClusterLeases).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var l queen.ShardLease
			var shard, count int32
			var owner *uuid.UUID
			if err := rows.Scan(&shard, &owner, &l.AcquiredAt, &l.ExpiresAt, &l.Live, &v.Now, &count); err != nil {
				return err
			}
			l.Shard, v.ShardCount = int(shard), int(count)
			if owner != nil {
				l.Owner = owner.String()
			}
			v.Shards = append(v.Shards, l)
		}
		return rows.Err()
	})
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return v, unavailable(err)
	}
	return v, nil
}
