package loadtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/transport"
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
	ack(ctx context.Context, group string, acks []transport.Ack) ([]queen.AckResult, error)
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

// newConsumeClient connects a client to target (nats:// or http://); name
// names the NATS connection; token (Config.AdminToken) goes with configure.
func newConsumeClient(target, name, token string, hc *http.Client) (consumeClient, error) {
	if strings.HasPrefix(target, "nats://") {
		nc, err := transport.ConnectNATS(target, name)
		if err != nil {
			return nil, fmt.Errorf("connect to NATS at %s: %w", target, err)
		}
		return &natsConsumer{nc: nc, c: transport.NewClient(nc), token: token}, nil
	}
	return &httpConsumer{hc: hc, base: strings.TrimRight(target, "/"), token: token}, nil
}

// natsConsumer uses the transport client (queen.v1.pop, queen.v1.ack.batch)
// over its own NATS connection.
type natsConsumer struct {
	nc *nats.Conn
	c  *transport.Client
	// slack is how long a pop may take beyond its long poll (default 10s).
	slack time.Duration
	// token, when not empty, is sent with configure (Config.AdminToken).
	token string
}

func (n *natsConsumer) pop(ctx context.Context, r popReq) (queen.PopResult, error) {
	// The broker answers by the end of the long poll (at once without
	// one); allow it slack more.
	slack := n.slack
	if slack <= 0 {
		slack = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, r.wait+slack)
	defer cancel()
	res, err := n.c.Pop(ctx, transport.PopOptions{Queue: r.queue, Partition: r.partition, Batch: r.batch, Wait: r.wait > 0,
		TimeoutMs: int(r.wait.Milliseconds()), ConsumerGroup: r.group, Partitions: r.partitions})
	if err != nil {
		return res, asQueenError(err, "pop")
	}
	return res, nil
}

func (n *natsConsumer) ack(ctx context.Context, group string, acks []transport.Ack) ([]queen.AckResult, error) {
	out, err := n.c.Ack(ctx, group, acks)
	if err != nil {
		return nil, asQueenError(err, "ack")
	}
	return out, nil
}

func (n *natsConsumer) configure(ctx context.Context, body []byte) ([]byte, error) {
	if n.token == "" {
		out, err := n.c.Configure(ctx, body)
		if err != nil {
			return nil, asQueenError(err, "configure")
		}
		return out, nil
	}
	// With the admin token in the request's headers (the transport
	// client's Configure sends none).
	m := nats.NewMsg(transport.SubjectConfigure)
	m.Data = body
	m.Header.Set("Authorization", "Bearer "+n.token)
	msg, err := n.nc.RequestMsgWithContext(ctx, m)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return nil, queen.ErrUnavailable.With("no broker answers on %s", m.Subject)
	case err != nil:
		return nil, queen.ErrTimeout.With("request on %s: %v", m.Subject, err)
	}
	if code := msg.Header.Get("Nats-Service-Error-Code"); code != "" {
		st, _ := strconv.Atoi(code)
		return nil, httpError("NATS", m.Subject, st, msg.Data)
	}
	return msg.Data, nil
}

func (n *natsConsumer) close() { n.nc.Close() }

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

// httpConsumer uses GET /api/v1/pop/queue/{queue} and POST
// /api/v1/ack/batch (SPEC.md §4).
type httpConsumer struct {
	hc   *http.Client
	base string
	// transportFailed tells whether the last request failed in transport
	// (no answer from the broker).
	transportFailed bool
	// token, when not empty, is sent with configure (Config.AdminToken).
	token string
}

func (h *httpConsumer) pop(ctx context.Context, r popReq) (queen.PopResult, error) {
	var res queen.PopResult
	q := url.Values{}
	q.Set("batch", strconv.Itoa(r.batch))
	if r.partitions > 1 {
		q.Set("partitions", strconv.Itoa(r.partitions))
	}
	if r.wait > 0 {
		q.Set("wait", "true")
		q.Set("timeout", strconv.FormatInt(r.wait.Milliseconds(), 10))
	}
	q.Set("consumerGroup", r.group)
	u := h.base + "/api/v1/pop/queue/" + url.PathEscape(r.queue)
	if r.partition != "" {
		u += "/partition/" + url.PathEscape(r.partition)
	}
	u += "?" + q.Encode()
	// The broker answers by the end of the long poll; allow it 10 s more.
	ctx, cancel := context.WithTimeout(ctx, r.wait+10*time.Second)
	defer cancel()
	status, data, err := h.do(ctx, http.MethodGet, u, nil)
	if err != nil {
		return res, err
	}
	switch status {
	case http.StatusNoContent:
		return res, nil
	case http.StatusOK:
		if err := json.Unmarshal(data, &res); err != nil {
			return res, queen.ErrInternal.With("GET %s: the 200 reply does not decode: %v: %s", u, err, clip(data))
		}
		return res, nil
	}
	return res, httpError(http.MethodGet, u, status, data)
}

func (h *httpConsumer) ack(ctx context.Context, group string, acks []transport.Ack) ([]queen.AckResult, error) {
	body, err := json.Marshal(struct {
		Acks          []transport.Ack `json:"acknowledgments"`
		ConsumerGroup string          `json:"consumerGroup,omitempty"`
	}{acks, group})
	if err != nil {
		return nil, queen.ErrInternal.With("ack body: %v", err)
	}
	u := h.base + "/api/v1/ack/batch"
	status, data, err := h.do(ctx, http.MethodPost, u, body)
	if err != nil {
		return nil, err
	}
	if status != http.StatusOK {
		return nil, httpError(http.MethodPost, u, status, data)
	}
	var out []queen.AckResult
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, queen.ErrInternal.With("POST %s: the 200 reply does not decode: %v: %s", u, err, clip(data))
	}
	return out, nil
}

func (h *httpConsumer) configure(ctx context.Context, body []byte) ([]byte, error) {
	u := h.base + "/api/v1/configure"
	status, data, err := h.doAuth(ctx, http.MethodPost, u, h.token, body)
	if err != nil {
		return nil, err
	}
	if status != http.StatusOK && status != http.StatusCreated {
		return nil, httpError(http.MethodPost, u, status, data)
	}
	return data, nil
}

func (h *httpConsumer) close() {}

// do sends one request and reads the whole reply; a transport failure is a
// retryable *queen.Error.
func (h *httpConsumer) do(ctx context.Context, method, u string, body []byte) (int, []byte, error) {
	return h.doAuth(ctx, method, u, "", body)
}

// doAuth is do with the admin token token (none when "").
func (h *httpConsumer) doAuth(ctx context.Context, method, u, token string, body []byte) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return 0, nil, queen.ErrInternal.With("%s %s: %v", method, u, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	h.transportFailed = false
	resp, err := h.hc.Do(req)
	if err != nil {
		h.transportFailed = true
		if ctx.Err() != nil {
			return 0, nil, queen.ErrTimeout.With("%s %s: %v", method, u, err)
		}
		return 0, nil, queen.ErrUnavailable.With("%s %s: %v", method, u, err)
	}
	data, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		h.transportFailed = true
		return 0, nil, queen.ErrTimeout.With("%s %s: reading the reply: %v", method, u, err)
	}
	return resp.StatusCode, data, nil
}

// httpError decodes an error reply (SPEC.md §10).
func httpError(method, u string, status int, data []byte) error {
	e := &queen.Error{}
	if json.Unmarshal(data, e) != nil || e.Code == "" {
		// Not an API error body: a 5xx may pass, anything else will not.
		return &queen.Error{Status: status, Code: "http_" + strconv.Itoa(status), Retryable: status >= 500,
			Message: fmt.Sprintf("%s %s answered %d: %s", method, u, status, clip(data))}
	}
	e.Status = status
	return e
}
