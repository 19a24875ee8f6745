package broker

import (
	"context"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/consume"
	"github.com/queen-mq/queen-go/persistence"
)

// consumer is the transports' consumer side (transport.Consumer): the store
// answers leases, transactions, the DLQ and queue/group administration
// itself (its methods, promoted), while pops and acks go through the pop
// coordinator (hints, long polls, wake-ups) instead of straight to the
// store.
type consumer struct {
	*persistence.Store
	pops *consume.Coordinator
}

// Pop answers a pop through the coordinator (consume.Coordinator.Pop).
func (c consumer) Pop(ctx context.Context, req queen.PopRequest) (queen.PopResult, error) {
	return c.pops.Pop(ctx, req)
}

// Ack applies acks and wakes the polls of partitions retried
// (consume.Coordinator.Ack), rather than the store's Ack alone.
func (c consumer) Ack(ctx context.Context, items []queen.AckItem) ([]queen.AckResult, error) {
	return c.pops.Ack(ctx, items)
}
