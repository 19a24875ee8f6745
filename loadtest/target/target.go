package target

import (
	"context"
	"crypto/tls"
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

// Result is the outcome of one item of a request.
type Result struct {
	// Status is the item's verdict (queued, duplicate or failed).
	Status queen.Verdict
	// ID is the message id the broker answered (the original's for a
	// duplicate).
	ID uuid.UUID
	// Code is a failed item's error code.
	Code string
	// Bad describes a reply element that does not match its item ("" when it does).
	Bad string
}

// Sender sends one request for a producer. Send fills out (len(items))
// with one Result per item, or returns an error when no item got a verdict:
// a *queen.Error whose Retryable tells whether the same items may be sent
// again (a lost or timed-out request: outcome unknown).
type Sender interface {
	Send(ctx context.Context, items []client.PushItem, out []Result) error
	Close()
}

// NATSSender pushes with the Go client (transport/client) over its own
// NATS connection (one per producer, like independent clients).
type NATSSender struct {
	nc *nats.Conn
	c  *client.Client
}

// NewNATSSender connects producer's own NATS connection to url (one
// server or a cluster's list, spread by producer: ConnectSpread); token,
// when not empty, goes with every push (client.Token: the JWT of a broker
// with JWT on, SPEC.md §14); extra are more connection options (the NATS
// credentials and CA, client.NATSAuth).
func NewNATSSender(url string, producer int, token string, extra ...nats.Option) (*NATSSender, error) {
	nc, err := ConnectSpread(url, producer, fmt.Sprintf("queen-loadtest-%d", producer), extra...)
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at %s: %w", url, err)
	}
	return &NATSSender{nc: nc, c: client.NewNATS(nc, client.Token(token))}, nil
}

// ConnectSpread connects client i to urls, one NATS URL or a
// comma-separated list of a cluster's servers (client.ConnectNATS).
// With a list, client i starts at server i mod len and moves on in list
// order (the list rotated by i, not shuffled: nats.DontRandomize), so the
// load's clients are spread evenly over the nodes and a node's loss hits
// a known share of them. extra are more connection options.
func ConnectSpread(urls string, i int, name string, extra ...nats.Option) (*nats.Conn, error) {
	list, err := client.ParseNATSURLs(urls)
	if err != nil || len(list) < 2 {
		return client.ConnectNATS(urls, name, extra...)
	}
	k := i % len(list)
	rotated := append(append([]string{}, list[k:]...), list[:k]...)
	return client.ConnectNATS(strings.Join(rotated, ","), name, append([]nats.Option{nats.DontRandomize()}, extra...)...)
}

// Send is Sender.Send.
func (s *NATSSender) Send(ctx context.Context, items []client.PushItem, out []Result) error {
	return pushWith(ctx, s.c, items, out)
}

// Close closes the sender's NATS connection.
func (s *NATSSender) Close() { s.nc.Close() }

// pushWith pushes items with c and fills out, or returns the request's
// error when no item got a verdict.
func pushWith(ctx context.Context, c *client.Client, items []client.PushItem, out []Result) error {
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

// HTTPSender pushes with the Go client over the HTTP gateway (POST
// /api/v1/push) of one broker, or of several: it starts at the first and
// moves to the next after a request no broker answered (client.HTTPConfig);
// the producer retries the failed request's items with the same
// transactionIds, wherever they go next.
type HTTPSender struct{ c *client.Client }

// NewHTTPSender pushes over the HTTP gateway of urls with hc (several:
// it moves to the next after a transport failure, client.HTTPConfig);
// token as NewNATSSender's.
func NewHTTPSender(hc *http.Client, token string, urls ...string) *HTTPSender {
	return &HTTPSender{c: client.NewHTTP(client.HTTPConfig{URLs: urls, Client: hc}, client.Token(token))}
}

// NewHTTPClient is the HTTP client the producers (and consumers) of a run
// share: idle connections for twice producers (no request timeout of its
// own: each request has its context); tc, when not nil, is the TLS
// configuration of https:// targets (client.TrustCA: --ca-file).
func NewHTTPClient(producers int, tc *tls.Config) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if tc != nil {
		tr.TLSClientConfig = tc.Clone() // the transport adds its ALPN protocols to it
	}
	tr.MaxIdleConns = producers * 2
	tr.MaxIdleConnsPerHost = producers * 2
	return &http.Client{Transport: tr}
}

// Send is Sender.Send.
func (s *HTTPSender) Send(ctx context.Context, items []client.PushItem, out []Result) error {
	return pushWith(ctx, s.c, items, out)
}

// Close does nothing (hc is the caller's).
func (s *HTTPSender) Close() {}

// AsyncPush is the push function of async producer i: its own NATS
// connection (nats://), or its HTTP target (several targets: round robin by
// producer, without failover; the async producer retries); token as
// NewNATSSender's, as are extra.
func AsyncPush(target string, targets []string, hc *http.Client, i int, token string, extra ...nats.Option) (client.PushFunc, func(), error) {
	if strings.HasPrefix(target, "nats://") {
		s, err := NewNATSSender(target, i, token, extra...)
		if err != nil {
			return nil, nil, err
		}
		return s.c.Push, s.Close, nil
	}
	if len(targets) > 1 {
		target = targets[i%len(targets)]
	}
	return NewHTTPSender(hc, token, target).c.Push, func() {}, nil
}

// fillResults turns a broker's reply elements into results, checking each
// element belongs to its item.
func fillResults(items []client.PushItem, replies []wire.PushReply, out []Result) {
	for i := range items {
		r := &replies[i]
		it := &items[i]
		res := Result{Status: r.Status, Code: r.Code}
		if r.Index != i || r.TransactionID != it.TransactionID || r.Partition != it.Partition || r.QueueName != it.Queue {
			res.Bad = fmt.Sprintf("reply element %d is {index %d, queue %q, partition %q, transaction_id %q} for item {queue %q, partition %q, transactionId %q}",
				i, r.Index, r.QueueName, r.Partition, r.TransactionID, it.Queue, it.Partition, it.TransactionID)
		}
		switch r.Status {
		case queen.Queued, queen.Duplicate:
			id, err := uuid.Parse(r.MessageID)
			if err != nil && res.Bad == "" {
				res.Bad = fmt.Sprintf("reply element %d (%s) has message_id %q", i, r.Status, r.MessageID)
			}
			res.ID = id
		case queen.Failed:
			if res.Code == "" {
				res.Code = "unknown"
			}
		default:
			if res.Bad == "" {
				res.Bad = fmt.Sprintf("reply element %d has status %q", i, r.Status)
			}
		}
		if res.Bad != "" {
			// Not a verdict we can trust: handle it as a failed item.
			res.Status, res.Code = queen.Failed, "bad_reply"
		}
		out[i] = res
	}
}

// RawSender writes a request's items as rows of the raw table with one COPY.
type RawSender struct {
	// W writes the rows; Table is the raw table (schema queen_raw).
	W     *persistence.RawWriter
	Table string
	rows  []persistence.RawMessage
}

// Send is Sender.Send: one COPY of the items' rows, each answered queued
// with a fresh UUIDv7.
func (s *RawSender) Send(ctx context.Context, items []client.PushItem, out []Result) error {
	s.rows = s.rows[:0]
	for i := range items {
		id, err := uuid.NewV7()
		if err != nil {
			id = uuid.New()
		}
		s.rows = append(s.rows, persistence.RawMessage{ID: id, Queue: items[i].Queue, Partition: items[i].Partition, TransactionID: items[i].TransactionID, Payload: items[i].Payload})
	}
	if _, err := s.W.CopyMessages(ctx, s.Table, s.rows); err != nil {
		var qe *queen.Error
		if errors.As(err, &qe) {
			return qe
		}
		return queen.ErrUnavailable.With("COPY into %s: %v", s.Table, err)
	}
	for i := range out {
		out[i] = Result{Status: queen.Queued, ID: s.rows[i].ID}
	}
	return nil
}

// Close does nothing (W is the caller's).
func (s *RawSender) Close() {}

// Clip is b trimmed and cut at 300 bytes, for an error message.
func Clip(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}
