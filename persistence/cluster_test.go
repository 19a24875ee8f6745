package persistence

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	queen "github.com/queen-mq/queen-go"
)

// Lease tests expire a broker by moving its expiries back (tests only), never
// by waiting.

func expire(t testing.TB, s *Store, id uuid.UUID) {
	t.Helper()
	ctx := context.Background()
	_, err := s.pool.Exec(ctx, `UPDATE queen.brokers SET expires_at = clock_timestamp() - interval '1 second' WHERE id = $1`, id)
	require.NoError(t, err)
	_, err = s.pool.Exec(ctx, `UPDATE queen.shard_leases SET expires_at = clock_timestamp() - interval '1 second' WHERE owner = $1`, id)
	require.NoError(t, err)
}

// testBuild is what the tests' brokers advertise: this binary's schema and
// layout.
var testBuild = queen.Build{Release: "0.0.0-test", Revision: "test", Schema: SchemaVersion(), Layout: LayoutGeneration()}

func claim(t testing.TB, s *Store, id uuid.UUID) (held, taken []int) {
	t.Helper()
	held, taken, err := s.ClaimShards(context.Background(), id, "http://"+id.String()[:8], testBuild, time.Minute)
	require.NoError(t, err)
	return held, taken
}

// owners maps each shard to its live owner ("" when free or expired).
func owners(t testing.TB, s *Store) map[int]string {
	t.Helper()
	v, err := s.ClusterState(context.Background())
	require.NoError(t, err)
	out := map[int]string{}
	for _, l := range v.Shards {
		if l.Live {
			out[l.Shard] = l.Owner
		} else {
			out[l.Shard] = ""
		}
	}
	return out
}

// TestClusterShardCountIsFixedAtCreation: the first count wins, later ones
// read it back; brokers creating the cluster at once make one row and one
// lease per shard.
func TestClusterShardCountIsFixedAtCreation(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	got := make([]int, 8)
	errs := make([]error, 8)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], errs[i] = s.InitCluster(ctx, 8+i)
		}()
	}
	wg.Wait()
	for i := range got {
		require.NoError(t, errs[i])
		require.Equal(t, got[0], got[i], "every broker reads the same count")
	}
	n, err := s.InitCluster(ctx, 64)
	require.NoError(t, err)
	require.Equal(t, got[0], n, "a later start adopts the stored count")
	v, err := s.ClusterState(ctx)
	require.NoError(t, err)
	require.Equal(t, n, v.ShardCount)
	require.Len(t, v.Shards, n)
	for i, l := range v.Shards {
		require.Equal(t, i, l.Shard)
		require.Empty(t, l.Owner)
		require.False(t, l.Live)
	}
	_, err = s.InitCluster(ctx, 0)
	require.Error(t, err)
}

// TestClusterClaimsConvergeToFairShares: one broker takes every shard; as
// brokers join, each tick renews up to ceil(shards / live brokers), frees the
// surplus and claims free shards, so the spread converges; a released or
// expired broker's shards are claimed by the others.
func TestClusterClaimsConvergeToFairShares(t *testing.T) {
	t.Parallel()
	s := setup(t)
	_, err := s.InitCluster(context.Background(), 8)
	require.NoError(t, err)
	a, b, c := uuid.New(), uuid.New(), uuid.New()

	held, taken := claim(t, s, a)
	require.Equal(t, []int{0, 1, 2, 3, 4, 5, 6, 7}, held)
	require.Equal(t, held, taken)
	held, taken = claim(t, s, a)
	require.Len(t, held, 8, "renewed")
	require.Empty(t, taken)

	held, _ = claim(t, s, b)
	require.Empty(t, held, "nothing is free yet")
	held, _ = claim(t, s, a)
	require.Equal(t, []int{0, 1, 2, 3}, held, "a keeps its fair share of 4 and frees the rest")
	held, taken = claim(t, s, b)
	require.Equal(t, []int{4, 5, 6, 7}, held)
	require.Equal(t, held, taken)

	claim(t, s, c) // fair share 3: nothing free
	for _, id := range []uuid.UUID{a, b, c, a, b, c} {
		claim(t, s, id)
	}
	count := map[string]int{}
	for _, o := range owners(t, s) {
		require.NotEmpty(t, o, "every shard is owned")
		count[o]++
	}
	require.Equal(t, map[string]int{a.String(): 3, b.String(): 3, c.String(): 2}, count)

	// c shuts down cleanly: its shards are free at once and the others
	// share them out (fair share 4).
	n, err := s.ReleaseShards(context.Background(), c)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	claim(t, s, a)
	claim(t, s, b)
	count = map[string]int{}
	for _, o := range owners(t, s) {
		count[o]++
	}
	require.Equal(t, map[string]int{a.String(): 4, b.String(): 4}, count)

	// b stops renewing: once its heartbeat and leases have run out, a takes
	// everything; b, back, does not renew what a took.
	expire(t, s, b)
	held, taken = claim(t, s, a)
	require.Len(t, held, 8)
	require.Equal(t, []int{4, 5, 6, 7}, taken)
	held, _ = claim(t, s, b)
	require.Empty(t, held, "a lease another broker took is never renewed")
	for sh, o := range owners(t, s) {
		require.Equal(t, a.String(), o, "shard %d", sh)
	}

	v, err := s.ClusterState(context.Background())
	require.NoError(t, err)
	live := map[string]int{}
	for _, br := range v.Brokers {
		require.True(t, br.Live)
		live[br.ID] = br.Shards
	}
	require.Equal(t, map[string]int{a.String(): 8, b.String(): 0}, live, "c removed its row at release")
}

// TestClusterConcurrentClaimsNeverShareAShard: brokers claiming at the same
// moment skip each other's rows; no shard ever has two owners.
func TestClusterConcurrentClaimsNeverShareAShard(t *testing.T) {
	t.Parallel()
	s := setup(t)
	_, err := s.InitCluster(context.Background(), 64)
	require.NoError(t, err)
	ids := []uuid.UUID{uuid.New(), uuid.New(), uuid.New(), uuid.New()}
	for _, id := range ids { // every broker is live before the race
		_, err := s.pool.Exec(context.Background(), `INSERT INTO queen.brokers (id, expires_at) VALUES ($1, clock_timestamp() + interval '1 minute')`, id)
		require.NoError(t, err)
	}
	for round := 0; round < 3; round++ {
		var wg sync.WaitGroup
		helds := make([][]int, len(ids))
		for i, id := range ids {
			wg.Add(1)
			go func() {
				defer wg.Done()
				h, _, err := s.ClaimShards(context.Background(), id, "", testBuild, time.Minute)
				if err != nil {
					t.Error(err)
				}
				helds[i] = h
			}()
		}
		wg.Wait()
		seen := map[int]int{}
		for i, h := range helds {
			require.LessOrEqual(t, len(h), 16, "broker %d holds more than its fair share", i)
			for _, sh := range h {
				seen[sh]++
				require.Equal(t, 1, seen[sh], "shard %d held twice", sh)
			}
		}
	}
	count := map[string]int{}
	for _, o := range owners(t, s) {
		count[o]++
	}
	require.Len(t, count, 4, "after three rounds every shard is owned, 16 each: %v", count)
	for o, n := range count {
		require.Equal(t, 16, n, "broker %s", o)
	}
}

// TestBrokersAdvertiseTheirBuild: a heartbeat writes the broker's release,
// revision, schema version and layout generation to queen.brokers, and the
// cluster view reads them back; a row inserted without them (a broker older
// than the guard) reads as generation 0.
func TestBrokersAdvertiseTheirBuild(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setup(t)
	_, err := s.InitCluster(ctx, 4)
	require.NoError(t, err)
	id := uuid.Must(uuid.NewV7())
	claim(t, s, id)
	legacy := uuid.Must(uuid.NewV7())
	_, err = s.pool.Exec(ctx, `INSERT INTO queen.brokers (id, http_url, expires_at) VALUES ($1, 'http://legacy', clock_timestamp() + interval '1 minute')`, legacy)
	require.NoError(t, err)

	var layout, schema int32
	var release, revision string
	require.NoError(t, s.pool.QueryRow(ctx, `SELECT layout, schema_version, release, revision FROM queen.brokers WHERE id = $1`, id).Scan(&layout, &schema, &release, &revision))
	require.Equal(t, testBuild, queen.Build{Release: release, Revision: revision, Schema: int(schema), Layout: int(layout)})

	v, err := s.ClusterState(ctx)
	require.NoError(t, err)
	got := map[string]queen.Build{}
	for _, b := range v.Brokers {
		got[b.ID] = b.Build
	}
	require.Equal(t, map[string]queen.Build{id.String(): testBuild, legacy.String(): {}}, got)
}
