package actors

import (
	"context"
	"sync"

	"github.com/google/uuid"

	queen "github.com/queen-mq/queen-go"
)

// resolver turns the partition keys of first commits into partition ids,
// creating the partitions that do not exist yet (SPEC.md §1), many at once:
// pushes spread over thousands of new partitions cost a few statements per
// batch of keys instead of a transaction each. Keys wait in a queue; up to
// resolverRunners goroutines each take up to resolverBatch keys, call
// Store.EnsurePartitions and answer every key of the batch. No timer: a
// batch is whatever queued while the previous calls ran.
type resolver struct {
	h *Host

	mu      sync.Mutex
	queue   []resolveReq
	running int
}

type resolveReq struct {
	key  partitionKey
	done func(uuid.UUID, error)
}

const (
	resolverRunners = 4
	resolverBatch   = 1000
)

// resolve queues key; done is called once, from another goroutine, with
// the partition's id or the error of its batch (retryable errors such as
// queen.ErrUnavailable: the caller answers the push failed).
func (r *resolver) resolve(key partitionKey, done func(uuid.UUID, error)) {
	r.mu.Lock()
	r.queue = append(r.queue, resolveReq{key: key, done: done})
	start := r.running < resolverRunners
	if start {
		r.running++
	}
	r.mu.Unlock()
	if start {
		go r.run()
	}
}

func (r *resolver) run() {
	for {
		r.mu.Lock()
		n := min(len(r.queue), resolverBatch)
		if n == 0 {
			r.running--
			r.queue = nil
			r.mu.Unlock()
			return
		}
		batch := make([]resolveReq, n)
		copy(batch, r.queue)
		r.queue = r.queue[n:]
		r.mu.Unlock()

		keys := make([]queen.PartitionKey, n)
		for i, q := range batch {
			keys[i] = queen.PartitionKey{Queue: q.key.queue, Partition: q.key.partition}
		}
		ctx, cancel := context.WithTimeout(context.Background(), r.h.cfg.CommitTimeout)
		ids, err := r.h.cfg.Store.EnsurePartitions(ctx, keys)
		cancel()
		for i, q := range batch {
			if err != nil {
				q.done(uuid.Nil, err)
			} else {
				q.done(ids[i], nil)
			}
		}
	}
}
