package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/transport/wire"
)

// The operator calls (SPEC.md §9, §13). They are admin routes: the client's
// AdminToken is sent. Each returns the decoded reply and the body as the
// broker sent it (queen's CLI prints it with -o json); errors as Client's.

// ClusterView reads the cluster view (queen.v1.cluster, GET
// /api/v1/cluster; SPEC.md §9). token, when not empty, is sent as
// "Authorization: Bearer <token>" instead of the client's AdminToken.
// Errors are *queen.Error.
func (c *Client) ClusterView(ctx context.Context, token string) (queen.ClusterView, error) {
	if token == "" {
		token = c.token
	}
	var v queen.ClusterView
	_, err := c.call(ctx, &Request{Subject: wire.SubjectCluster, Method: http.MethodGet, Path: "/api/v1/cluster", Token: token}, &v)
	return v, err
}

// Cluster is ClusterView with the client's AdminToken, and the raw body.
func (c *Client) Cluster(ctx context.Context) (queen.ClusterView, []byte, error) {
	var v queen.ClusterView
	raw, err := c.call(ctx, c.admin(wire.SubjectCluster, http.MethodGet, "/api/v1/cluster", nil, nil), &v)
	return v, raw, err
}

// Whoami asks the broker who it takes the client's token for
// (queen.v1.auth.whoami, GET /api/v1/auth/whoami; SPEC.md §14): the access
// control in force (wire.AccessJWT, AccessAdminToken or AccessOpen), the
// token's sub, level, roles and expiry. With JWT on a missing or invalid
// token is 401 unauthorized saying why; with JWT off and an admin token
// configured, 401 without it. Errors are *queen.Error.
func (c *Client) Whoami(ctx context.Context) (wire.WhoamiReply, []byte, error) {
	var out wire.WhoamiReply
	raw, err := c.call(ctx, c.admin(wire.SubjectWhoami, http.MethodGet, "/api/v1/auth/whoami", nil, nil), &out)
	return out, raw, err
}

// admin is an admin route's request, with the client's AdminToken.
func (c *Client) admin(subject, method, path string, body, natsBody []byte) *Request {
	return &Request{Subject: subject, Method: method, Path: path, Body: body, NATSBody: natsBody, Token: c.token}
}

// Queues lists the queues with their partitions, messages and depth (GET
// /api/v1/resources/queues; HTTP only).
func (c *Client) Queues(ctx context.Context) ([]queen.QueueSummary, []byte, error) {
	var out wire.QueuesReply
	raw, err := c.call(ctx, c.admin("", http.MethodGet, "/api/v1/resources/queues", nil, nil), &out)
	return out.Queues, raw, err
}

// Queue returns one queue with its effective options (queen.v1.queue, GET
// /api/v1/resources/queues/{queue}); queen.ErrNotFound (404) for a queue
// that does not exist.
func (c *Client) Queue(ctx context.Context, name string) (queen.QueueInfo, []byte, error) {
	var out queen.QueueInfo
	raw, err := c.call(ctx, c.admin(wire.SubjectQueue, http.MethodGet, "/api/v1/resources/queues/"+url.PathEscape(name), nil, []byte(name)), &out)
	return out, raw, err
}

// Dedup asks the dedup inspector (queen.v1.dedup, GET /api/v1/dedup) what
// the next push of transactionID to (queue, partition) would get.
func (c *Client) Dedup(ctx context.Context, queue, partition, transactionID string) (queen.DedupInspection, []byte, error) {
	q := url.Values{"queue": {queue}, "partition": {partition}, "transactionId": {transactionID}}
	nb, _ := json.Marshal(map[string]string{"queue": queue, "partition": partition, "transactionId": transactionID})
	var out queen.DedupInspection
	raw, err := c.call(ctx, c.admin(wire.SubjectDedup, http.MethodGet, "/api/v1/dedup?"+q.Encode(), nil, nb), &out)
	return out, raw, err
}

// DeadLetters lists dead letters, oldest first (GET /api/v1/dlq; HTTP
// only): f's Queue, ConsumerGroup and Partition ("" = any), Limit (0: the
// broker's 100) and Offset.
func (c *Client) DeadLetters(ctx context.Context, f queen.DLQFilter) (wire.DeadLettersReply, []byte, error) {
	q := url.Values{}
	for _, kv := range [...]struct{ k, v string }{{"queue", f.Queue}, {"consumerGroup", f.ConsumerGroup}, {"partition", f.Partition}} {
		if kv.v != "" {
			q.Set(kv.k, kv.v)
		}
	}
	if f.Limit > 0 {
		q.Set("limit", strconv.Itoa(f.Limit))
	}
	if f.Offset > 0 {
		q.Set("offset", strconv.Itoa(f.Offset))
	}
	var out wire.DeadLettersReply
	raw, err := c.call(ctx, c.admin("", http.MethodGet, "/api/v1/dlq?"+q.Encode(), nil, nil), &out)
	return out, raw, err
}

// Replay pushes dead letters back onto their partitions (queen.v1.dlq.replay,
// POST /api/v1/dlq/replay; SPEC.md §13); body is the replay request
// ({"queue","consumerGroup","ids":[...]} or a filter).
func (c *Client) Replay(ctx context.Context, body any) (wire.ReplayReply, []byte, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return wire.ReplayReply{}, nil, queen.ErrInvalidJSON.With("the replay request: %v", err)
	}
	var out wire.ReplayReply
	raw, err := c.call(ctx, c.admin(wire.SubjectDLQReplay, http.MethodPost, "/api/v1/dlq/replay", b, nil), &out)
	return out, raw, err
}

// Peek reads stored messages of one partition above q.After (queen.v1.peek,
// GET /api/v1/queues/{queue}/messages): nothing is leased or moved.
func (c *Client) Peek(ctx context.Context, q queen.PeekQuery) (queen.PeekResult, []byte, error) {
	v := url.Values{"partition": {q.Partition}, "after": {strconv.FormatInt(q.After, 10)}, "limit": {strconv.Itoa(q.Limit)}}
	nb, _ := json.Marshal(q)
	var out queen.PeekResult
	raw, err := c.call(ctx, c.admin(wire.SubjectPeek, http.MethodGet, "/api/v1/queues/"+url.PathEscape(q.Queue)+"/messages?"+v.Encode(), nil, nb), &out)
	return out, raw, err
}

// QueueDetail returns a queue's partitions and its consumer groups' cursors
// and lag (queen.v1.queue.detail, GET /api/v1/queues/{queue}).
func (c *Client) QueueDetail(ctx context.Context, queue string) (queen.QueueDetail, []byte, error) {
	nb, _ := json.Marshal(wire.QueueDetailRequest{Queue: queue})
	var out queen.QueueDetail
	raw, err := c.call(ctx, c.admin(wire.SubjectQueueDetail, http.MethodGet, "/api/v1/queues/"+url.PathEscape(queue), nil, nb), &out)
	return out, raw, err
}

// Health asks GET /health (HTTP only): nil when the broker and its
// PostgreSQL answer, else the error (503 when the database is down).
func (c *Client) Health(ctx context.Context) error {
	_, err := c.Do(ctx, &Request{Method: http.MethodGet, Path: "/health"})
	return err
}

// Metrics reads the broker's Prometheus text (GET /metrics; HTTP only) and
// returns the samples whose name is in names, by name (a name absent from
// the text is absent from the map). Samples with labels are not read.
func (c *Client) Metrics(ctx context.Context, names ...string) (map[string]float64, error) {
	rep, err := c.Do(ctx, &Request{Method: http.MethodGet, Path: "/metrics"})
	if err != nil {
		return nil, err
	}
	want := make(map[string]bool, len(names))
	for _, n := range names {
		want[n] = true
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(rep.Body))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		name, val, ok := bytes.Cut(line, []byte{' '})
		if !ok || !want[string(name)] {
			continue
		}
		if f, err := strconv.ParseFloat(string(bytes.TrimSpace(val)), 64); err == nil {
			out[string(name)] = f
		}
	}
	return out, sc.Err()
}
