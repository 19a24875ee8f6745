package loadtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/persistence"
	"github.com/queen-mq/queen-go/transport"
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
	send(ctx context.Context, items []transport.PushItem, out []result) error
	close()
}

// natsSender pushes with the transport client over its own NATS connection
// (one per producer, like independent clients).
type natsSender struct {
	nc *nats.Conn
	c  *transport.Client
}

func newNATSSender(url string, producer int) (*natsSender, error) {
	nc, err := connectSpread(url, producer, fmt.Sprintf("queen-loadtest-%d", producer))
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at %s: %w", url, err)
	}
	return &natsSender{nc: nc, c: transport.NewClient(nc)}, nil
}

// connectSpread connects client i to urls, one NATS URL or a
// comma-separated list of a cluster's servers (transport.ConnectNATS).
// With a list, client i starts at server i mod len and moves on in list
// order (the list rotated by i, not shuffled: nats.DontRandomize), so the
// load's clients are spread evenly over the nodes and a node's loss hits
// a known share of them.
func connectSpread(urls string, i int, name string) (*nats.Conn, error) {
	list, err := transport.ParseNATSURLs(urls)
	if err != nil || len(list) < 2 {
		return transport.ConnectNATS(urls, name)
	}
	k := i % len(list)
	rotated := append(append([]string{}, list[k:]...), list[:k]...)
	return transport.ConnectNATS(strings.Join(rotated, ","), name, nats.DontRandomize())
}

func (s *natsSender) send(ctx context.Context, items []transport.PushItem, out []result) error {
	replies, err := s.c.Push(ctx, items)
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

func (s *natsSender) close() { s.nc.Close() }

// httpSender pushes with POST {base}/api/v1/push.
type httpSender struct {
	hc  *http.Client
	url string
	// transportFailed tells whether the last send failed in transport (no
	// answer from the broker).
	transportFailed bool
}

func newHTTPClient(producers int) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = producers * 2
	tr.MaxIdleConnsPerHost = producers * 2
	return &http.Client{Transport: tr}
}

func (s *httpSender) send(ctx context.Context, items []transport.PushItem, out []result) error {
	replies, err := s.push(ctx, items)
	if err != nil {
		return err
	}
	fillResults(items, replies, out)
	return nil
}

// push is one POST of items with the contract of transport.PushFunc: the
// replies when the broker answered with verdicts (201, or 503 with every
// item failed), else an error (a *queen.Error).
func (s *httpSender) push(ctx context.Context, items []transport.PushItem) ([]wire.PushReply, error) {
	body := transport.AppendPushRequest(nil, items)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(body))
	if err != nil {
		return nil, queen.ErrInternal.With("push request: %v", err)
	}
	req.Header.Set("Content-Type", "application/json")
	s.transportFailed = false
	resp, err := s.hc.Do(req)
	if err != nil {
		s.transportFailed = true
		if ctx.Err() != nil {
			return nil, queen.ErrTimeout.With("POST %s: %v", s.url, err)
		}
		return nil, queen.ErrUnavailable.With("POST %s: %v", s.url, err)
	}
	data, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		s.transportFailed = true
		return nil, queen.ErrTimeout.With("POST %s: reading the reply: %v", s.url, err)
	}
	if resp.StatusCode == http.StatusCreated || resp.StatusCode == http.StatusServiceUnavailable {
		if replies, err := wire.DecodePushReplies(data); err == nil && len(replies) == len(items) && len(items) > 0 {
			return replies, nil
		}
	}
	e := &queen.Error{}
	if json.Unmarshal(data, e) != nil || e.Code == "" {
		return nil, queen.ErrInternal.With("POST %s answered %d: %s", s.url, resp.StatusCode, clip(data))
	}
	e.Status = resp.StatusCode
	return nil, e
}

// asyncPush is the push function of async producer i: its own NATS
// connection (nats://), or POST to its HTTP target (several targets: round
// robin by producer, without failover; the async producer retries).
func asyncPush(cfg *Config, hc *http.Client, i int) (transport.PushFunc, func(), error) {
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
	// One sender per request in flight: push is called concurrently, and
	// transportFailed is per request.
	url := strings.TrimRight(target, "/") + "/api/v1/push"
	return func(ctx context.Context, items []transport.PushItem) ([]wire.PushReply, error) {
		s := httpSender{hc: hc, url: url}
		return s.push(ctx, items)
	}, func() {}, nil
}

func (s *httpSender) close() {}

// fillResults turns a broker's reply elements into results, checking each
// element belongs to its item.
func fillResults(items []transport.PushItem, replies []wire.PushReply, out []result) {
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

func (s *rawSender) send(ctx context.Context, items []transport.PushItem, out []result) error {
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
