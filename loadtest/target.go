package loadtest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/persistence"
	"github.com/queen-mq/queen-go/transport/client"
	"github.com/queen-mq/queen-go/transport/wire"
)

// result is the outcome of one item of a request.
type result struct {
	status queen.Verdict
	id     uuid.UUID
	code   string
	// bad describes a reply element that does not match its item ("" when it does).
	bad string
}

// sender sends one request for a producer. send fills out (len(items))
// with one result per item, or returns an error when no item got a verdict:
// a *queen.Error whose Retryable tells whether the same items may be sent
// again (a lost or timed-out request: outcome unknown).
type sender interface {
	send(ctx context.Context, items []client.PushItem, out []result) error
	close()
}

// natsSender pushes with the Go client (transport/client) over its own
// NATS connection (one per producer, like independent clients).
type natsSender struct {
	nc *nats.Conn
	c  *client.Client
}

func newNATSSender(url string, producer int) (*natsSender, error) {
	nc, err := connectSpread(url, producer, fmt.Sprintf("queen-loadtest-%d", producer))
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at %s: %w", url, err)
	}
	return &natsSender{nc: nc, c: client.NewNATS(nc)}, nil
}

// connectSpread connects client i to urls, one NATS URL or a
// comma-separated list of a cluster's servers (client.ConnectNATS).
// With a list, client i starts at server i mod len and moves on in list
// order (the list rotated by i, not shuffled: nats.DontRandomize), so the
// load's clients are spread evenly over the nodes and a node's loss hits
// a known share of them.
func connectSpread(urls string, i int, name string) (*nats.Conn, error) {
	list, err := client.ParseNATSURLs(urls)
	if err != nil || len(list) < 2 {
		return client.ConnectNATS(urls, name)
	}
	k := i % len(list)
	rotated := append(append([]string{}, list[k:]...), list[:k]...)
	return client.ConnectNATS(strings.Join(rotated, ","), name, nats.DontRandomize())
}

func (s *natsSender) send(ctx context.Context, items []client.PushItem, out []result) error {
	return pushWith(ctx, s.c, items, out)
}

func (s *natsSender) close() { s.nc.Close() }

// pushWith pushes items with c and fills out, or returns the request's
// error when no item got a verdict.
func pushWith(ctx context.Context, c *client.Client, items []client.PushItem, out []result) error {
	replies, err := c.Push(ctx, items)
	if len(replies) == len(items) && len(items) > 0 {
		// 201, or 503 with every item failed: the per-item verdicts count.
		fillResults(items, replies, out)
		return nil
	}
	if err == nil {
		return queen.ErrInternal.With("the broker answered %d verdicts for %d items", len(replies), len(items))
	}
	return err
}

// httpSender pushes with the Go client over the HTTP gateway (POST
// /api/v1/push) of one broker, or of several: it starts at the first and
// moves to the next after a request no broker answered (client.HTTPConfig);
// the producer retries the failed request's items with the same
// transactionIds, wherever they go next.
type httpSender struct{ c *client.Client }

func newHTTPSender(hc *http.Client, urls ...string) *httpSender {
	return &httpSender{c: client.NewHTTP(client.HTTPConfig{URLs: urls, Client: hc})}
}

func newHTTPClient(producers int) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = producers * 2
	tr.MaxIdleConnsPerHost = producers * 2
	return &http.Client{Transport: tr}
}

func (s *httpSender) send(ctx context.Context, items []client.PushItem, out []result) error {
	return pushWith(ctx, s.c, items, out)
}

func (s *httpSender) close() {}

// asyncPush is the push function of async producer i: its own NATS
// connection (nats://), or its HTTP target (several targets: round robin by
// producer, without failover; the async producer retries).
func asyncPush(cfg *Config, hc *http.Client, i int) (client.PushFunc, func(), error) {
	if strings.HasPrefix(cfg.Target, "nats://") {
		s, err := newNATSSender(cfg.Target, i)
		if err != nil {
			return nil, nil, err
		}
		return s.c.Push, s.close, nil
	}
	target := cfg.Target
	if len(cfg.Targets) > 1 {
		target = cfg.Targets[i%len(cfg.Targets)]
	}
	return newHTTPSender(hc, target).c.Push, func() {}, nil
}

// fillResults turns a broker's reply elements into results, checking each
// element belongs to its item.
func fillResults(items []client.PushItem, replies []wire.PushReply, out []result) {
	for i := range items {
		r := &replies[i]
		it := &items[i]
		res := result{status: r.Status, code: r.Code}
		if r.Index != i || r.TransactionID != it.TransactionID || r.Partition != it.Partition || r.QueueName != it.Queue {
			res.bad = fmt.Sprintf("reply element %d is {index %d, queue %q, partition %q, transaction_id %q} for item {queue %q, partition %q, transactionId %q}",
				i, r.Index, r.QueueName, r.Partition, r.TransactionID, it.Queue, it.Partition, it.TransactionID)
		}
		switch r.Status {
		case queen.Queued, queen.Duplicate:
			id, err := uuid.Parse(r.MessageID)
			if err != nil && res.bad == "" {
				res.bad = fmt.Sprintf("reply element %d (%s) has message_id %q", i, r.Status, r.MessageID)
			}
			res.id = id
		case queen.Failed:
			if res.code == "" {
				res.code = "unknown"
			}
		default:
			if res.bad == "" {
				res.bad = fmt.Sprintf("reply element %d has status %q", i, r.Status)
			}
		}
		if res.bad != "" {
			// Not a verdict we can trust: handle it as a failed item.
			res.status, res.code = queen.Failed, "bad_reply"
		}
		out[i] = res
	}
}

// rawSender writes a request's items as rows of the raw table with one COPY.
type rawSender struct {
	w     *persistence.RawWriter
	table string
	rows  []persistence.RawMessage
}

func (s *rawSender) send(ctx context.Context, items []client.PushItem, out []result) error {
	s.rows = s.rows[:0]
	for i := range items {
		id, err := uuid.NewV7()
		if err != nil {
			id = uuid.New()
		}
		s.rows = append(s.rows, persistence.RawMessage{ID: id, Queue: items[i].Queue, Partition: items[i].Partition, TransactionID: items[i].TransactionID, Payload: items[i].Payload})
	}
	if _, err := s.w.CopyMessages(ctx, s.table, s.rows); err != nil {
		var qe *queen.Error
		if errors.As(err, &qe) {
			return qe
		}
		return queen.ErrUnavailable.With("COPY into %s: %v", s.table, err)
	}
	for i := range out {
		out[i] = result{status: queen.Queued, id: s.rows[i].ID}
	}
	return nil
}

func (s *rawSender) close() {}

func clip(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}
