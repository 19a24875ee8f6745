package transport

import (
	"context"
	"net/http"

	queen "github.com/queen-mq/queen-go"
)

// Operator is the operator API of SPEC.md §13 the transports need
// (persistence.Store).
type Operator interface {
	// InspectDedup answers the dedup inspector for the transactionId whose
	// hash is h in partition (queue, partition); queen.ErrNotFound when the
	// queue or partition does not exist.
	InspectDedup(ctx context.Context, queue, partition string, h queen.Hash) (queen.DedupInspection, error)
}

// dedup answers GET /api/v1/dedup and queen.v1.dedup (SPEC.md §13): 200 with
// a queen.DedupInspection; 400 for bad input, 404 for an unknown queue or
// partition. It writes nothing.
func (s *Service) dedup(ctx context.Context, q queen.DedupQuery, err error) reply {
	if err != nil {
		return errReply(err)
	}
	if s.cfg.Operator == nil {
		return errReply(queen.ErrNotFound.With("this broker has no dedup inspector"))
	}
	res, err := s.cfg.Operator.InspectDedup(ctx, q.Queue, q.Partition, q.Hash)
	if err != nil {
		return errReply(err)
	}
	return reply{status: http.StatusOK, body: res}
}
