package broker

import (
	"context"
	"time"

	"github.com/google/uuid"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/consume"
	"github.com/queen-mq/queen-go/persistence"
)

// consumer is the transports' consumer side (transport.Consumer): pops and
// acks go through the pop coordinator (hints, long polls, wake-ups), leases,
// transactions, the DLQ and queue/group administration straight to the
// store.
type consumer struct {
	pops  *consume.Coordinator
	store *persistence.Store
}

// Pop answers a pop through the coordinator (consume.Coordinator.Pop).
func (c consumer) Pop(ctx context.Context, req queen.PopRequest) (queen.PopResult, error) {
	return c.pops.Pop(ctx, req)
}

// Ack applies acks and wakes the polls of partitions retried
// (consume.Coordinator.Ack).
func (c consumer) Ack(ctx context.Context, items []queen.AckItem) ([]queen.AckResult, error) {
	return c.pops.Ack(ctx, items)
}

// ExtendLease is persistence.Store.ExtendLease.
func (c consumer) ExtendLease(ctx context.Context, lease uuid.UUID, seconds int64) (time.Time, error) {
	return c.store.ExtendLease(ctx, lease, seconds)
}

// DeadLetters is persistence.Store.DeadLetters.
func (c consumer) DeadLetters(ctx context.Context, f queen.DLQFilter) ([]queen.DeadLetter, int64, error) {
	return c.store.DeadLetters(ctx, f)
}

// DeleteQueue is persistence.Store.DeleteQueue.
func (c consumer) DeleteQueue(ctx context.Context, queue string) (existed bool, partitions int64, err error) {
	return c.store.DeleteQueue(ctx, queue)
}

// ListQueues is persistence.Store.ListQueues.
func (c consumer) ListQueues(ctx context.Context) ([]queen.QueueSummary, error) {
	return c.store.ListQueues(ctx)
}

// DeleteGroup is persistence.Store.DeleteGroup.
func (c consumer) DeleteGroup(ctx context.Context, group string) (int64, error) {
	return c.store.DeleteGroup(ctx, group)
}

// Seek is persistence.Store.Seek.
func (c consumer) Seek(ctx context.Context, queue, group string, req queen.SeekRequest) (int, error) {
	return c.store.Seek(ctx, queue, group, req)
}

// SetSubscription is persistence.Store.SetSubscription.
func (c consumer) SetSubscription(ctx context.Context, group string, ts time.Time) (int, error) {
	return c.store.SetSubscription(ctx, group, ts)
}

// Transaction is persistence.Store.Transaction.
func (c consumer) Transaction(ctx context.Context, req *queen.TxnRequest) ([]queen.TxnOpResult, error) {
	return c.store.Transaction(ctx, req)
}
