package persistence

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

var sqlAnalyzePartitions = q("analyze_partitions")

// Planner statistics of queen.partitions after bulk creation.
//
// A push spread over thousands of new partitions creates them within
// seconds, while autovacuum analyzes a table at most once a minute
// (autovacuum_naptime): meanwhile PostgreSQL plans every statement that
// joins queen.partitions for the near-empty table it last saw. The load
// test's audit then ran nested sequential scans (3.7 s a pass at 10,000
// partitions instead of 0.27 s) and a 20-second run at 10,000 partitions
// stored half as much. So the Store analyzes the table itself once the
// partitions it created since its last analyze reach analyzeMinCreated and
// half the rows it counted then: geometric steps (a million partitions
// created one by one cost about twenty analyzes), each a sample of at most
// 30,000 rows whatever the table's size.
const (
	// analyzeMinCreated is the fewest partitions created between analyzes.
	analyzeMinCreated = 500
	// analyzeTimeout bounds one ANALYZE.
	analyzeTimeout = 30 * time.Second
)

// analyzer counts the partitions this Store created and runs one ANALYZE
// at a time in the background when they are due (newAnalyzer).
type analyzer struct {
	run     func(context.Context) error // the ANALYZE
	ctx     context.Context             // cancelled by close
	cancel  context.CancelFunc
	mu      sync.Mutex
	fresh   int64 // partitions created since the last analyze started
	counted int64 // partitions created before it (by this Store)
	running bool
	closed  bool
	wg      sync.WaitGroup
}

func newAnalyzer(run func(context.Context) error) *analyzer {
	ctx, cancel := context.WithCancel(context.Background())
	return &analyzer{run: run, ctx: ctx, cancel: cancel}
}

// analyzeDue reports whether created new partitions, on top of counted at
// the last analyze, call for another: at least analyzeMinCreated and at
// least half of counted.
func analyzeDue(created, counted int64) bool {
	return created >= analyzeMinCreated && 2*created >= counted
}

// analyzePartitions runs ANALYZE queen.partitions.
func (s *Store) analyzePartitions(ctx context.Context) error {
	_, err := s.pool.Exec(ctx, sqlAnalyzePartitions)
	return err
}

// created counts the rows statements creating partitions inserted (count
// is their Exec callback); the owner adds n to the analyzer (add) once their
// batch has committed: a batch is one implicit transaction, and an ANALYZE
// started before its commit would not see them (the analyzer would then
// count them as analyzed and wait for 500 more).
type created struct{ n int64 }

func (c *created) count(ct pgconn.CommandTag) error {
	c.n += ct.RowsAffected()
	return nil
}

// add records n created partitions and starts the analyze in a goroutine
// when one is due and none is running. A failed analyze is logged; the
// count it covered is kept, so the next creation retries it.
func (a *analyzer) add(n int64) {
	if n <= 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.fresh += n
	if a.closed || a.running || !analyzeDue(a.fresh, a.counted) {
		return
	}
	a.running = true
	covered := a.fresh
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		ctx, cancel := context.WithTimeout(a.ctx, analyzeTimeout)
		err := a.run(ctx)
		cancel()
		a.mu.Lock()
		defer a.mu.Unlock()
		a.running = false
		if err != nil {
			if a.closed {
				return
			}
			slog.Warn("persistence: ANALYZE queen.partitions failed; autovacuum will do it later", "err", err)
			return
		}
		a.fresh -= covered
		a.counted += covered
	}()
}

// close stops new analyzes, cancels the one running and waits for it.
func (a *analyzer) close() {
	a.mu.Lock()
	a.closed = true
	a.mu.Unlock()
	a.cancel()
	a.wg.Wait()
}
