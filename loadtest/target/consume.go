package target

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/transport/client"
)

// ConsumeClient is what a consumer (and the wake probe) needs of the
// broker: long-poll pops, batch acks and queue configuration, over NATS or
// HTTP (SPEC.md §4, §6). Errors are *queen.Error (Retryable tells whether
// trying again can help).
type ConsumeClient interface {
	// Pop pops at most r.Batch messages for r.Group from r.Queue; no
	// messages means nothing was available (204).
	Pop(ctx context.Context, r PopReq) (queen.PopResult, error)
	// Ack sends acks in one call; the results are in request order.
	Ack(ctx context.Context, group string, acks []client.Ack) ([]queen.AckResult, error)
	// Configure sends a configure body and returns the reply.
	Configure(ctx context.Context, body []byte) ([]byte, error)
	// Close releases the client's connection.
	Close()
}

// PopReq is one pop.
type PopReq struct {
	Queue string
	// Partition is "" for any partition of the queue.
	Partition string
	Group     string
	Batch     int
	// Partitions > 1 lets a pop of any partition claim that many.
	Partitions int
	// Wait > 0 makes the pop a long poll of up to Wait; 0 answers at once.
	Wait time.Duration
}

// NewConsumeClient connects client i to target (nats:// or http://; a
// list of NATS servers is spread by i, ConnectSpread); name names the NATS
// connection; token (the harness's --token), when not empty, goes with
// every request (client.Token and client.AdminToken): the JWT of a broker
// with JWT on, or its QUEEN_ADMIN_TOKEN, which guards configure.
func NewConsumeClient(target string, i int, name, token string, hc *http.Client, extra ...nats.Option) (ConsumeClient, error) {
	if strings.HasPrefix(target, "nats://") {
		nc, err := ConnectSpread(target, i, name, extra...)
		if err != nil {
			return nil, fmt.Errorf("connect to NATS at %s: %w", target, err)
		}
		return &NATSConsumer{ClientConsumer{c: client.NewNATS(nc, client.AdminToken(token), client.Token(token)), closeFn: nc.Close}}, nil
	}
	return NewHTTPConsumer(hc, token, target), nil
}

// NATSConsumer is a ClientConsumer over its own NATS connection
// (queen.v1.pop, queen.v1.ack.batch).
type NATSConsumer struct{ ClientConsumer }

// NewHTTPConsumer is a ClientConsumer over the HTTP gateway of urls (GET
// /api/v1/pop/queue/{queue}, POST /api/v1/ack/batch; several: it moves to
// the next after a transport failure, client.HTTPConfig); token as
// NewConsumeClient's.
func NewHTTPConsumer(hc *http.Client, token string, urls ...string) *ClientConsumer {
	return &ClientConsumer{c: client.NewHTTP(client.HTTPConfig{URLs: urls, Client: hc}, client.AdminToken(token), client.Token(token)), closeFn: func() {}}
}

// ClientConsumer uses the Go client (transport/client), over NATS or HTTP.
type ClientConsumer struct {
	c       *client.Client
	closeFn func()
	// Slack is how long a pop may take beyond its long poll (default 10s).
	Slack time.Duration
}

// Pop is ConsumeClient.Pop: it waits r.Wait plus Slack at most.
func (n *ClientConsumer) Pop(ctx context.Context, r PopReq) (queen.PopResult, error) {
	// The broker answers by the end of the long poll (at once without
	// one); allow it slack more.
	slack := n.Slack
	if slack <= 0 {
		slack = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, r.Wait+slack)
	defer cancel()
	res, err := n.c.Pop(ctx, client.PopOptions{Queue: r.Queue, Partition: r.Partition, Batch: r.Batch, Wait: r.Wait > 0,
		TimeoutMs: int(r.Wait.Milliseconds()), ConsumerGroup: r.Group, Partitions: r.Partitions})
	if err != nil {
		return res, asQueenError(err, "pop")
	}
	return res, nil
}

// Ack is ConsumeClient.Ack.
func (n *ClientConsumer) Ack(ctx context.Context, group string, acks []client.Ack) ([]queen.AckResult, error) {
	out, err := n.c.Ack(ctx, group, acks)
	if err != nil {
		return nil, asQueenError(err, "ack")
	}
	return out, nil
}

// Configure is ConsumeClient.Configure.
func (n *ClientConsumer) Configure(ctx context.Context, body []byte) ([]byte, error) {
	out, err := n.c.Configure(ctx, body)
	if err != nil {
		return nil, asQueenError(err, "configure")
	}
	return out, nil
}

// Close closes the client's own NATS connection (nothing over HTTP).
func (n *ClientConsumer) Close() { n.closeFn() }

// asQueenError keeps a *queen.Error (a broker's answer or a transport
// failure) and calls anything else (a reply that does not decode) a
// retryable internal error.
func asQueenError(err error, what string) error {
	var qe *queen.Error
	if errors.As(err, &qe) {
		return qe
	}
	return queen.ErrInternal.With("%s: %v", what, err)
}
