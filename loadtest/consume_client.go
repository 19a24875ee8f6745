package loadtest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/transport/client"
)

// consumeClient is what a consumer (and the wake probe) needs of the
// broker: long-poll pops, batch acks and queue configuration, over NATS or
// HTTP (SPEC.md §4, §6). Errors are *queen.Error (Retryable tells whether
// trying again can help).
type consumeClient interface {
	// pop pops at most r.batch messages for r.group from r.queue; no
	// messages means nothing was available (204).
	pop(ctx context.Context, r popReq) (queen.PopResult, error)
	// ack sends acks in one call; the results are in request order.
	ack(ctx context.Context, group string, acks []client.Ack) ([]queen.AckResult, error)
	// configure sends a configure body and returns the reply.
	configure(ctx context.Context, body []byte) ([]byte, error)
	close()
}

// popReq is one pop.
type popReq struct {
	queue string
	// partition is "" for any partition of the queue.
	partition string
	group     string
	batch     int
	// partitions > 1 lets a pop of any partition claim that many.
	partitions int
	// wait > 0 makes the pop a long poll of up to wait; 0 answers at once.
	wait time.Duration
}

// newConsumeClient connects client i to target (nats:// or http://; a
// list of NATS servers is spread by i, connectSpread); name names the NATS
// connection; token (Config.AdminToken), when not empty, goes with
// configure (pushes, pops and acks never carry it).
func newConsumeClient(target string, i int, name, token string, hc *http.Client) (consumeClient, error) {
	if strings.HasPrefix(target, "nats://") {
		nc, err := connectSpread(target, i, name)
		if err != nil {
			return nil, fmt.Errorf("connect to NATS at %s: %w", target, err)
		}
		return &natsConsumer{clientConsumer{c: client.NewNATS(nc, client.AdminToken(token)), closeFn: nc.Close}}, nil
	}
	return newHTTPConsumer(hc, token, target), nil
}

// natsConsumer is a clientConsumer over its own NATS connection
// (queen.v1.pop, queen.v1.ack.batch).
type natsConsumer struct{ clientConsumer }

// newHTTPConsumer is a clientConsumer over the HTTP gateway of urls (GET
// /api/v1/pop/queue/{queue}, POST /api/v1/ack/batch; several: it moves to
// the next after a transport failure, client.HTTPConfig); token as
// newConsumeClient's.
func newHTTPConsumer(hc *http.Client, token string, urls ...string) *clientConsumer {
	return &clientConsumer{c: client.NewHTTP(client.HTTPConfig{URLs: urls, Client: hc}, client.AdminToken(token)), closeFn: func() {}}
}

// clientConsumer uses the Go client (transport/client), over NATS or HTTP.
type clientConsumer struct {
	c       *client.Client
	closeFn func()
	// slack is how long a pop may take beyond its long poll (default 10s).
	slack time.Duration
}

func (n *clientConsumer) pop(ctx context.Context, r popReq) (queen.PopResult, error) {
	// The broker answers by the end of the long poll (at once without
	// one); allow it slack more.
	slack := n.slack
	if slack <= 0 {
		slack = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, r.wait+slack)
	defer cancel()
	res, err := n.c.Pop(ctx, client.PopOptions{Queue: r.queue, Partition: r.partition, Batch: r.batch, Wait: r.wait > 0,
		TimeoutMs: int(r.wait.Milliseconds()), ConsumerGroup: r.group, Partitions: r.partitions})
	if err != nil {
		return res, asQueenError(err, "pop")
	}
	return res, nil
}

func (n *clientConsumer) ack(ctx context.Context, group string, acks []client.Ack) ([]queen.AckResult, error) {
	out, err := n.c.Ack(ctx, group, acks)
	if err != nil {
		return nil, asQueenError(err, "ack")
	}
	return out, nil
}

func (n *clientConsumer) configure(ctx context.Context, body []byte) ([]byte, error) {
	out, err := n.c.Configure(ctx, body)
	if err != nil {
		return nil, asQueenError(err, "configure")
	}
	return out, nil
}

func (n *clientConsumer) close() { n.closeFn() }

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
