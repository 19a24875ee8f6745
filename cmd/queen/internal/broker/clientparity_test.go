package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/transport/client"
)

// The Go client (transport/client) makes the same calls with the same
// answers over NATS and over the HTTP gateway: push, refusal, pop, lease
// extension, ack, transaction, the operator calls, with refusals decoded
// into the same *queen.Error.
func TestClientSameOverNATSAndHTTP(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, via := range []struct {
		name string
		c    *client.Client
	}{
		{"nats", client.NewNATS(e.nc)},
		{"http", client.NewHTTP(client.HTTPConfig{URLs: []string{e.base}, Client: e.hc})},
	} {
		t.Run(via.name, func(t *testing.T) {
			c, q := via.c, "parity-"+via.name
			_, err := c.Configure(ctx, []byte(fmt.Sprintf(`{"queue":%q,"options":{"leaseTime":30}}`, q)))
			require.NoError(t, err)

			items := []client.PushItem{{Queue: q, Partition: "p", TransactionID: "t1", Payload: json.RawMessage(`{"n":1}`)},
				{Queue: q, Partition: "p", TransactionID: "t2"}}
			rs, err := c.Push(ctx, items)
			require.NoError(t, err)
			require.Len(t, rs, 2)
			require.Equal(t, queen.Queued, rs[0].Status)
			rs, err = c.Push(ctx, items[:1])
			require.NoError(t, err)
			require.Equal(t, queen.Duplicate, rs[0].Status)

			// A refusal the client cannot foresee (the payload is not JSON)
			// comes back as the broker's registry error, its status set.
			_, err = c.Push(ctx, []client.PushItem{{Queue: q, Payload: json.RawMessage(`{`)}})
			var qe *queen.Error
			require.True(t, errors.As(err, &qe), "%v", err)
			require.Equal(t, queen.ErrInvalidJSON.Code, qe.Code)
			require.Equal(t, http.StatusBadRequest, qe.Status)
			require.Contains(t, qe.Field, "items[0]")

			res, err := c.Pop(ctx, client.PopOptions{Queue: q, Partition: "p", Batch: 1, ConsumerGroup: "g"})
			require.NoError(t, err)
			require.Len(t, res.Messages, 1)
			m := res.Messages[0]
			require.Equal(t, "t1", m.TransactionID)
			require.NotNil(t, m.LeaseID)
			exp, err := c.ExtendLease(ctx, *m.LeaseID, 60)
			require.NoError(t, err)
			require.True(t, exp.After(time.Now().Add(30*time.Second)), "new expiry %s", exp)
			_, err = c.ExtendLease(ctx, "00000000-0000-0000-0000-000000000001", 60)
			require.ErrorIs(t, err, queen.ErrLeaseInvalid)

			acks, err := c.Ack(ctx, "g", []client.Ack{client.AckFor(m)})
			require.NoError(t, err)
			require.Len(t, acks, 1)
			require.True(t, acks[0].Success, "%+v", acks[0])

			// The next message, acked in a transaction that pushes one more.
			res, err = c.Pop(ctx, client.PopOptions{Queue: q, Partition: "p", Batch: 1, ConsumerGroup: "g"})
			require.NoError(t, err)
			require.Len(t, res.Messages, 1)
			ops, err := c.Transaction().Ack(client.AckFor(res.Messages[0])).Push(client.PushItem{Queue: q, Partition: "p", TransactionID: "t3"}).Commit(ctx)
			require.NoError(t, err)
			require.Len(t, ops, 2)
			_, err = c.Transaction().Push(client.PushItem{Queue: q, Partition: "p", TransactionID: "t3"}).Commit(ctx)
			require.ErrorIs(t, err, queen.ErrDuplicate)

			// t3, leased; then nothing for a pop without a wait: an empty
			// result (HTTP 204, an empty NATS reply).
			res, err = c.Pop(ctx, client.PopOptions{Queue: q, Partition: "p", Batch: 5, ConsumerGroup: "g"})
			require.NoError(t, err)
			require.Len(t, res.Messages, 1)
			require.Equal(t, "t3", res.Messages[0].TransactionID)
			res, err = c.Pop(ctx, client.PopOptions{Queue: q, Partition: "p", Batch: 5, ConsumerGroup: "g"})
			require.NoError(t, err)
			require.Empty(t, res.Messages)

			pk, _, err := c.Peek(ctx, queen.PeekQuery{Queue: q, Partition: "p", After: -1, Limit: 10})
			require.NoError(t, err)
			require.Len(t, pk.Messages, 3)
			d, raw, err := c.QueueDetail(ctx, q)
			require.NoError(t, err)
			require.NotEmpty(t, raw)
			require.Len(t, d.Partitions, 1)
			require.Equal(t, pk.Messages[2].Offset, d.Partitions[0].LastOffset)
			in, _, err := c.Dedup(ctx, q, "p", "t2")
			require.NoError(t, err)
			require.Equal(t, queen.InWindow, in.State)
			qi, _, err := c.Queue(ctx, q)
			require.NoError(t, err)
			require.Equal(t, q, qi.Name)
			v, _, err := c.Cluster(ctx)
			require.NoError(t, err)
			require.Positive(t, v.ShardCount)
			_, _, err = c.Queue(ctx, "no-such-queue")
			require.ErrorIs(t, err, queen.ErrNotFound)
			require.Equal(t, http.StatusNotFound, queen.AsError(err).Status)
		})
	}

	// The HTTP-only calls; over NATS they are refused without being sent.
	hc := client.NewHTTP(client.HTTPConfig{URLs: []string{e.base}, Client: e.hc})
	qs, _, err := hc.Queues(ctx)
	require.NoError(t, err)
	require.Len(t, qs, 2)
	dl, _, err := hc.DeadLetters(ctx, queen.DLQFilter{Queue: "parity-http"})
	require.NoError(t, err)
	require.Zero(t, dl.Total)
	require.NoError(t, hc.Health(ctx))
	ms, err := hc.Metrics(ctx, "queen_dedup_cache_bytes", "no_such_metric")
	require.NoError(t, err)
	require.Contains(t, ms, "queen_dedup_cache_bytes")
	require.NotContains(t, ms, "no_such_metric")
	_, _, err = client.NewNATS(e.nc).Queues(ctx)
	require.ErrorIs(t, err, queen.ErrNotFound)
}

// An HTTP client of several gateways moves to the next one after a request
// no broker answered, and reports that request as a *client.NoAnswerError
// (retryable, outcome unknown).
func TestClientHTTPFailover(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dead := "http://127.0.0.1:1" // nothing listens on port 1
	c := client.NewHTTP(client.HTTPConfig{URLs: []string{dead, e.base}, Client: e.hc})
	items := []client.PushItem{{Queue: "failover", TransactionID: "f1"}}
	_, err := c.Push(ctx, items)
	var na *client.NoAnswerError
	require.True(t, errors.As(err, &na), "%v", err)
	require.True(t, queen.AsError(err).Retryable)
	require.ErrorIs(t, err, queen.ErrUnavailable)
	rs, err := c.Push(ctx, items)
	require.NoError(t, err)
	require.Equal(t, queen.Queued, rs[0].Status)
}
