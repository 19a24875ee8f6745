package persistence

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	queen "github.com/queen-mq/queen-go"
)

// TestAnalyzeDue: an analyze is due once at least analyzeMinCreated
// partitions were created and at least half of those counted at the last
// one, so analyzes come in geometric steps.
func TestAnalyzeDue(t *testing.T) {
	for _, c := range []struct {
		created, counted int64
		due              bool
	}{
		{0, 0, false},
		{analyzeMinCreated - 1, 0, false},
		{analyzeMinCreated, 0, true},
		{analyzeMinCreated, 2 * analyzeMinCreated, true},
		{analyzeMinCreated, 2*analyzeMinCreated + 1, false},
		{500_000, 1_000_000, true},
		{499_999, 1_000_000, false},
	} {
		require.Equal(t, c.due, analyzeDue(c.created, c.counted), "created %d counted %d", c.created, c.counted)
	}
}

// TestAnalyzerRetriesAfterFailure: a failed analyze keeps its count, so
// the next creation runs it again; one runs at a time; close waits.
func TestAnalyzerRetriesAfterFailure(t *testing.T) {
	runs := make(chan struct{}, 4)
	results := make(chan error)
	a := newAnalyzer(func(context.Context) error { runs <- struct{}{}; return <-results })
	a.add(analyzeMinCreated)
	<-runs
	a.add(1) // one is running: not another
	results <- fmt.Errorf("boom")
	require.Eventually(t, func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return !a.running
	}, 10*time.Second, time.Millisecond)
	a.add(1)
	<-runs
	results <- nil
	a.close()
	require.Equal(t, int64(0), a.fresh)
	require.Equal(t, int64(analyzeMinCreated+2), a.counted)
	a.add(analyzeMinCreated * 10)
	require.Empty(t, runs, "closed: no more analyzes")
}

// TestBulkCreationAnalyzesPartitions: creating more than analyzeMinCreated
// partitions in one call makes the Store analyze queen.partitions, so the
// planner sees their number before autovacuum looks.
func TestBulkCreationAnalyzesPartitions(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	keys := make([]queen.PartitionKey, analyzeMinCreated+10)
	for i := range keys {
		keys[i] = queen.PartitionKey{Queue: "stats-bulk", Partition: fmt.Sprintf("p-%d", i)}
	}
	_, err := s.EnsurePartitions(ctx, keys)
	require.NoError(t, err)
	// The Store's analyzer finished a run covering them, and the catalog
	// (what the planner reads) holds their number: pg_class.reltuples is
	// written by ANALYZE's own transaction, where pg_stat_user_tables'
	// analyze_count waits for the backend's next statistics flush (under a
	// loaded test run it did not arrive within the minute).
	require.Eventually(t, func() bool {
		s.stats.mu.Lock()
		counted := s.stats.counted
		s.stats.mu.Unlock()
		var tuples float64
		err := s.pool.QueryRow(ctx, `SELECT c.reltuples FROM pg_class c WHERE c.oid = 'queen.partitions'::regclass`).Scan(&tuples)
		require.NoError(t, err)
		return counted >= int64(len(keys)) && tuples >= float64(len(keys))
	}, time.Minute, 20*time.Millisecond, "the Store analyzed queen.partitions")
}
