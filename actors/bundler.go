package actors

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	queen "github.com/queen-mq/queen-go"
)

// commitJob is one partition actor's fused batch, waiting to be committed.
type commitJob struct {
	key   partitionKey
	batch *queen.PushBatch
	bytes int64
	// done receives the outcome; it is called exactly once, off the actor.
	done func(out queen.PushOutcome, err error)
}

// bundler commits the batches of many partitions together (DESIGN.md: a
// bundler may put disjoint partitions in one transaction, locks in ascending
// partition id). Committers take every job waiting when they become free, up
// to the bundle limits, so bundles grow with load. While a commit is in
// flight, a free committer starts another only once Config.ParallelItems
// items wait, or Config.CommitHold after that commit began (hold); a
// commit with no other in flight starts at once. Each partition has at
// most one job in flight (its actor starts the next only after the
// outcome), so a bundle never holds a partition twice and the queue is
// bounded by the number of active partitions.
type bundler struct {
	h      *Host
	mu     sync.Mutex
	cond   *sync.Cond
	queue  []*commitJob
	queued int // items in queue
	// running counts the commits in flight; newest is when the newest
	// began, wake the timer that ends a hold (hold).
	running int
	newest  time.Time
	wake    *time.Timer
	// holds counts the times a free committer held waiting items.
	holds   atomic.Int64
	stopped bool
	exited  bool // the committers are gone: nothing queued would run
	wg      sync.WaitGroup
}

func newBundler(h *Host) *bundler {
	b := &bundler{h: h}
	b.cond = sync.NewCond(&b.mu)
	return b
}

// start starts the committers (Host.Start).
func (b *bundler) start() {
	for i := 0; i < b.h.cfg.Committers; i++ {
		b.wg.Add(1)
		go b.run()
	}
}

// submit queues a job; it never blocks. After stop, the job is answered
// shutting_down at once.
func (b *bundler) submit(j *commitJob) {
	b.mu.Lock()
	if b.exited {
		b.mu.Unlock()
		j.done(failAll(j.batch, queen.ErrShuttingDown), queen.ErrShuttingDown)
		return
	}
	b.queue = append(b.queue, j)
	b.queued += len(j.batch.Items)
	b.mu.Unlock()
	b.cond.Signal()
}

// stop lets the committers finish the queued jobs, then waits for them.
func (b *bundler) stop() {
	b.mu.Lock()
	b.stopped = true
	b.mu.Unlock()
	b.cond.Broadcast()
	b.wg.Wait()
	b.mu.Lock()
	b.exited = true
	late := b.queue
	b.queue, b.queued = nil, 0
	if b.wake != nil {
		b.wake.Stop()
	}
	b.mu.Unlock()
	for _, j := range late {
		j.done(failAll(j.batch, queen.ErrShuttingDown), queen.ErrShuttingDown)
	}
}

// hold reports whether a free committer should leave the queue for now:
// another commit is in flight, fewer than ParallelItems items wait, and
// the newest commit began less than CommitHold ago; then it arms the timer
// that wakes the committers when the hold ends. Call it with b.mu held.
func (b *bundler) hold() bool {
	if b.running == 0 || b.queued >= b.h.cfg.ParallelItems || b.stopped {
		return false
	}
	left := b.h.cfg.CommitHold - time.Since(b.newest)
	if left <= 0 {
		return false
	}
	if b.wake == nil {
		// Locking first: the broadcast cannot fall between a committer's
		// hold and its Wait.
		b.wake = time.AfterFunc(left, func() { b.mu.Lock(); b.mu.Unlock(); b.cond.Broadcast() }) //nolint:staticcheck // SA2001: the empty critical section is the point, see above
	} else {
		b.wake.Reset(left)
	}
	b.holds.Add(1)
	return true
}

func (b *bundler) take() []*commitJob {
	b.mu.Lock()
	defer b.mu.Unlock()
	for (len(b.queue) == 0 && !b.stopped) || (len(b.queue) > 0 && b.hold()) {
		b.cond.Wait()
	}
	if len(b.queue) == 0 {
		return nil
	}
	n, items, bytes := 0, 0, int64(0)
	for n < len(b.queue) && n < b.h.cfg.MaxBundlePartitions &&
		(n == 0 || (items+len(b.queue[n].batch.Items) <= b.h.cfg.MaxBundleItems && bytes+b.queue[n].bytes <= b.h.cfg.MaxBundleBytes)) {
		items += len(b.queue[n].batch.Items)
		bytes += b.queue[n].bytes
		n++
	}
	jobs := make([]*commitJob, n)
	copy(jobs, b.queue[:n])
	b.queued -= items
	b.running++
	b.newest = time.Now()
	b.queue = b.queue[n:]
	if len(b.queue) == 0 {
		b.queue = nil // let the backing array go
	}
	return jobs
}

func (b *bundler) run() {
	defer b.wg.Done()
	for {
		jobs := b.take()
		if jobs == nil {
			return
		}
		b.commit(jobs)
		b.mu.Lock()
		b.running--
		b.mu.Unlock()
		// A committer holding waiting items may go now.
		b.cond.Broadcast()
	}
}

// commit runs one transaction for the bundle (every job's partition id is
// known) and hands each job its outcome. It never panics: a panic becomes
// every item failed.
func (b *bundler) commit(jobs []*commitJob) {
	h := b.h
	answered := false
	defer func() {
		if p := recover(); p != nil && !answered {
			err := queen.ErrInternal.With("push commit panicked: %v", p)
			for _, j := range jobs {
				j.done(failAll(j.batch, err), err)
			}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), h.cfg.CommitTimeout)
	defer cancel()
	ready := jobs
	batches := make([]*queen.PushBatch, len(ready))
	for i, j := range ready {
		batches[i] = j.batch
	}
	start := time.Now()
	outs, err := h.cfg.Store.CommitBundle(ctx, batches)
	h.metrics.Commits.Inc()
	h.commits.Add(1)
	h.metrics.CommitSeconds.Observe(time.Since(start).Seconds())
	if err != nil {
		h.log.Warn("push commit failed", "partitions", len(ready), "err", err)
	}
	for i := range outs {
		if err == nil && outs[i].Err != nil {
			h.log.Warn("push commit skipped a partition", "partition", ready[i].key, "err", outs[i].Err)
		}
	}
	answered = true
	for i, j := range ready {
		if i >= len(outs) || len(outs[i].Results) != len(j.batch.Items) {
			e := queen.ErrInternal.With("commit returned no verdicts for partition %s", j.key)
			j.done(failAll(j.batch, e), e)
			continue
		}
		e := err
		if e == nil && outs[i].Err != nil {
			// This partition alone failed (its row lock was held); the
			// others committed.
			e = outs[i].Err
		}
		j.done(outs[i], e)
	}
}
