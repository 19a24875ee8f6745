package shards

import (
	"context"
	"errors"
	"sync"

	"github.com/nats-io/nats.go"

	queen "github.com/queen-mq/queen-go"
)

// Router splits push requests by shard and sends each group to its shard's
// subject. It is safe for concurrent use.
type Router struct {
	nc    *nats.Conn
	count int
	// chunk is the largest internal message, kept below the server's max_payload.
	chunk int
}

// NewRouter returns a Router over nc for count shards (DefaultCount when <= 0).
func NewRouter(nc *nats.Conn, count int) *Router {
	if count <= 0 {
		count = DefaultCount
	}
	chunk := int(nc.MaxPayload()) - 64<<10
	if chunk < 64<<10 {
		chunk = int(nc.MaxPayload()) / 2
	}
	return &Router{nc: nc, count: count, chunk: chunk}
}

// Push routes items and returns one verdict per item in request order. It
// never fails as a whole: items whose shard could not be reached or answered
// in time are queen.Failed with a retryable error (their outcome may be
// unknown, so clients retry with the same transaction ids).
func (r *Router) Push(ctx context.Context, items []*queen.Item) []queen.Result {
	results := make([]queen.Result, len(items))
	groups := map[int][]int{}
	var shardsInOrder []int
	for i, it := range items {
		n := Of(it.Queue, it.Partition, r.count)
		if _, ok := groups[n]; !ok {
			shardsInOrder = append(shardsInOrder, n)
		}
		groups[n] = append(groups[n], i)
	}
	var wg sync.WaitGroup
	for _, n := range shardsInOrder {
		wg.Add(1)
		go func(n int, idx []int) {
			defer wg.Done()
			r.pushShard(ctx, n, items, idx, results)
		}(n, groups[n])
	}
	wg.Wait()
	return results
}

// pushShard sends one shard's items in chunks below the NATS payload limit,
// one after another so that a partition's items keep request order.
func (r *Router) pushShard(ctx context.Context, n int, items []*queen.Item, idx []int, results []queen.Result) {
	for start := 0; start < len(idx); {
		end, size := start, 16
		for end < len(idx) {
			it := items[idx[end]]
			sz := len(it.Queue) + len(it.Partition) + len(it.TransactionID) + len(it.Payload) + 32
			if it.TraceID != nil {
				sz += len(*it.TraceID)
			}
			if end > start && size+sz > r.chunk {
				break
			}
			size += sz
			end++
		}
		chunk := make([]*queen.Item, end-start)
		for j := range chunk {
			chunk[j] = items[idx[start+j]]
		}
		rs, err := r.request(ctx, n, chunk)
		for j := range chunk {
			i := idx[start+j]
			if err != nil || j >= len(rs) {
				results[i] = queen.Result{Verdict: queen.Failed, Offset: -1, Err: queen.AsError(errOr(err))}
				continue
			}
			results[i] = rs[j]
		}
		start = end
	}
}

func (r *Router) request(ctx context.Context, n int, chunk []*queen.Item) ([]queen.Result, error) {
	body := encodeItems(make([]byte, 0, 256*len(chunk)), chunk)
	msg, err := r.nc.RequestWithContext(ctx, PushSubject(n), body)
	switch {
	case err == nil:
	case errors.Is(err, nats.ErrNoResponders):
		return nil, queen.ErrUnavailable.With("no broker serves shard %d; retry with the same transaction ids", n)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout), errors.Is(err, context.Canceled):
		return nil, queen.ErrTimeout.With("shard %d did not answer in time; the outcome is unknown, retry with the same transaction ids", n)
	default:
		return nil, queen.ErrUnavailable.With("shard %d request failed: %v", n, err)
	}
	rs, err := decodeResults(msg.Data)
	if err != nil {
		return nil, queen.ErrInternal.With("shard %d: %v", n, err)
	}
	if len(rs) != len(chunk) {
		return nil, queen.ErrInternal.With("shard %d answered %d verdicts for %d items", n, len(rs), len(chunk))
	}
	return rs, nil
}
