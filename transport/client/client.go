package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/transport/wire"
)

// Client is the Go client of a broker (SPEC.md §3–§6, §9, §11, §13) over
// one Transport: NATS (NewNATS) or the HTTP gateway (NewHTTP), the same
// calls and the same errors either way. It is safe for concurrent use.
//
// Errors: a request the broker refused is a *queen.Error (its Status, Code
// and Retryable; 4xx: nothing written), decoded in one place
// (Reply.Err); a request no broker answered is a *NoAnswerError wrapping
// queen.ErrUnavailable or queen.ErrTimeout (retryable, outcome unknown).
type Client struct {
	t Transport
	// nc is the NATS connection of a client over NATS (shard subjects).
	nc *nats.Conn
	// token is sent on admin routes (AdminToken).
	token string
	// bearer is sent on every request that carries no other token (Token).
	bearer string
	// shard is set by ShardAware.
	shard *shardState
}

// Option configures a Client (New, NewNATS, NewHTTP).
type Option func(*Client)

// AdminToken makes the client send "Authorization: Bearer <token>" on the
// admin routes and subjects (SPEC.md §13: the operator calls, the cluster
// view, a configure that deletes data), for brokers with QUEEN_ADMIN_TOKEN
// set. Empty (the default): no header.
func AdminToken(token string) Option { return func(c *Client) { c.token = token } }

// Token makes the client send "Authorization: Bearer <token>" on every
// request (an HTTP header, or a NATS message header on every subject,
// shard subjects included): the JWT of a broker with JWT on (SPEC.md §14),
// whose roles must allow the calls made (read-write for push, pop, ack,
// lease extension and transactions; admin for the operator calls and a
// configure that deletes data). On the admin routes the AdminToken, when
// given too, is sent instead. A broker with JWT off ignores it on the
// message plane. Empty (the default): no header.
func Token(token string) Option { return func(c *Client) { c.bearer = token } }

// New returns a client over t with opts.
func New(t Transport, opts ...Option) *Client {
	c := &Client{t: t}
	if nt, ok := t.(natsTransport); ok {
		c.nc = nt.nc
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

// NewNATS returns a client over nc (NATS(nc)) with opts (none: every push
// goes to queen.v1.push; ShardAware: pushes go to the shards' subjects).
func NewNATS(nc *nats.Conn, opts ...Option) *Client { return New(NATS(nc), opts...) }

// NewHTTP returns a client over the HTTP gateway(s) of cfg (HTTP(cfg)).
// ShardAware has no effect over HTTP: every push goes to POST /api/v1/push.
func NewHTTP(cfg HTTPConfig, opts ...Option) *Client { return New(HTTP(cfg), opts...) }

// Do sends r and returns the broker's answer with its error: nil for a 2xx,
// the broker's *queen.Error for a refusal (the Reply is returned too), a
// *NoAnswerError when no broker answered. The typed calls below are built
// on it; use it for a body the caller already holds (queen push --file).
func (c *Client) Do(ctx context.Context, r *Request) (Reply, error) {
	rep, err := c.roundTrip(ctx, r)
	if err != nil {
		return rep, err
	}
	return rep, rep.Err()
}

// roundTrip sends r over the client's transport, with the client's Token
// when r carries no token of its own (r itself is not changed).
func (c *Client) roundTrip(ctx context.Context, r *Request) (Reply, error) {
	if r.Token == "" && c.bearer != "" {
		rc := *r
		rc.Token = c.bearer
		r = &rc
	}
	return c.t.RoundTrip(ctx, r)
}

// PushItem is one item to push (SPEC.md §3). An empty TransactionID makes the
// broker generate one (and the item unique); Payload is any JSON value (nil
// means {}).
type PushItem struct {
	Queue         string          `json:"queue"`
	Partition     string          `json:"partition,omitempty"`
	TransactionID string          `json:"transactionId,omitempty"`
	TraceID       string          `json:"traceId,omitempty"`
	Payload       json.RawMessage `json:"payload,omitempty"`
}

// Validate checks the item's text as the broker does, with the broker's
// error (queen.ValidateItem, SPEC.md §10): a queue (1 to 255 bytes), a
// partition (up to 255 bytes) and a TransactionID (up to 1024 bytes) of
// valid UTF-8 without control characters, names also without invisible
// format or separator characters, a TraceID of valid UTF-8. i is the item's
// index in its request (the error names "items[i].field"), or -1 for an item
// alone (the error names "field"). The payload is left to the broker.
func (it *PushItem) Validate(i int) error {
	if e := queen.ValidateItem(i, it.Queue, it.Partition, it.TransactionID, it.TraceID); e != nil {
		return e
	}
	return nil
}

// ValidatePushItems is PushItem.Validate of every item, by its index: nil, or
// the *queen.Error (400) of the first item the broker would refuse. Every
// client path calls it before encoding, since JSON encoding would turn
// invalid UTF-8 into U+FFFD (so "\xff\xfe" and "\xfe\xff" would reach the
// broker as one transactionId, and the second push would be a duplicate).
func ValidatePushItems(items []PushItem) error {
	for i := range items {
		if err := items[i].Validate(i); err != nil {
			return err
		}
	}
	return nil
}

// Push pushes items and returns one reply per item, in order. err is a
// *queen.Error for a refused request (4xx, nothing written) or a transport
// failure. Items are checked first (ValidatePushItems): an item the broker
// would refuse for its text is refused here with the broker's error
// (invalid_utf8, control_character, too_long, missing_field, naming
// "items[i].field") and nothing is sent. When every item failed (503) the replies are returned too, with
// err matching the first item's error code.
//
// A shard-aware client (ShardAware) splits items by shard and sends the
// groups at once, each to its shard's subject; the replies are the same,
// in request order, each Index the item's place in items. A push the client
// cannot vouch for (an item the broker may refuse: a payload not
// JSON or over 4 MiB, over 10,000 items) goes whole to queen.v1.push, so a
// refusal still writes nothing. Only a refusal the client could not foresee
// (a payload over a broker's smaller QUEEN_MAX_PAYLOAD_BYTES) may leave other
// shards' items stored; sending the same items again is exact (duplicate
// with the original's id).
func (c *Client) Push(ctx context.Context, items []PushItem) ([]wire.PushReply, error) {
	if err := ValidatePushItems(items); err != nil {
		return nil, err
	}
	if c.shard != nil && c.nc != nil && len(items) > 0 {
		if out, ok, err := c.pushSharded(ctx, items); ok {
			return out, err
		}
		c.shard.stats.unsplit.Add(1)
	}
	out, err := c.pushPublic(ctx, items)
	if err != nil {
		return nil, err
	}
	for _, r := range out {
		if r.Status != queen.Failed {
			return out, nil
		}
	}
	if len(out) > 0 { // 503: every item failed
		return out, queen.ErrUnavailable.With("every item failed: %s", out[0].Error)
	}
	return out, nil
}

// PushRequest is the request of a push body {"items":[...]} as is
// (queen.v1.push, POST /api/v1/push), for Do: the broker validates it
// (SPEC.md §10). queen push --file sends a file's body with it.
func PushRequest(body []byte) *Request {
	return &Request{Subject: wire.SubjectPush, Method: http.MethodPost, Path: "/api/v1/push", Body: body}
}

// pushPublic sends items whole to queen.v1.push (POST /api/v1/push); the
// replies answer items in order, or the error is the request's.
func (c *Client) pushPublic(ctx context.Context, items []PushItem) ([]wire.PushReply, error) {
	rep, err := c.roundTrip(ctx, PushRequest(AppendPushRequest(make([]byte, 0, 64+len(items)*(itemOverhead+64)), items)))
	if err != nil {
		return nil, err
	}
	return pushReplies(rep, len(items))
}

// pushReplies decodes a push answer: n replies (2xx, or 503 with every
// item failed), or the error of a refused request.
func pushReplies(rep Reply, n int) ([]wire.PushReply, error) {
	if rep.OK() || rep.Status == http.StatusServiceUnavailable {
		if out, jerr := wire.DecodePushReplies(rep.Body); jerr == nil {
			if len(out) != n {
				return nil, queen.ErrInternal.With("the broker answered %d verdicts for %d items", len(out), n)
			}
			return out, nil
		}
	}
	return nil, rep.Err()
}

// AppendPushRequest appends the push body {"items":[...]} for items to dst,
// as encoding/json would write it for PushItem, without reflection. A
// non-empty Payload is written as is: it must be one JSON value (the broker
// refuses the request with 400 otherwise). Invalid UTF-8 in a string is
// written as U+FFFD, as encoding/json writes it: check items with
// ValidatePushItems first (Push does).
func AppendPushRequest(dst []byte, items []PushItem) []byte {
	dst = append(dst, `{"items":[`...)
	for i := range items {
		it := &items[i]
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"queue":`...)
		dst = wire.AppendJSONString(dst, it.Queue)
		if it.Partition != "" {
			dst = append(dst, `,"partition":`...)
			dst = wire.AppendJSONString(dst, it.Partition)
		}
		if it.TransactionID != "" {
			dst = append(dst, `,"transactionId":`...)
			dst = wire.AppendJSONString(dst, it.TransactionID)
		}
		if it.TraceID != "" {
			dst = append(dst, `,"traceId":`...)
			dst = wire.AppendJSONString(dst, it.TraceID)
		}
		if len(it.Payload) > 0 {
			dst = append(dst, `,"payload":`...)
			dst = append(dst, it.Payload...)
		}
		dst = append(dst, '}')
	}
	return append(dst, "]}"...)
}

// Configure configures a queue (SPEC.md §6: queen.v1.configure, POST
// /api/v1/configure) with body as is; the reply is returned raw. The
// client's AdminToken is sent (a change of an existing queue that deletes
// data needs it).
func (c *Client) Configure(ctx context.Context, body []byte) (json.RawMessage, error) {
	rep, err := c.Do(ctx, &Request{Subject: wire.SubjectConfigure, Method: http.MethodPost, Path: "/api/v1/configure", Body: body, Token: c.token})
	if err != nil {
		return nil, err
	}
	return rep.Body, nil
}

// call sends r and decodes a 2xx answer's JSON body into out (nil: not
// decoded); it returns the body as sent.
func (c *Client) call(ctx context.Context, r *Request, out any) ([]byte, error) {
	rep, err := c.Do(ctx, r)
	if err != nil {
		return rep.Body, err
	}
	if out != nil {
		if err := json.Unmarshal(rep.Body, out); err != nil {
			return rep.Body, queen.ErrInternal.With("%s %s: the reply does not decode: %v", r.Method, r.Path, err)
		}
	}
	return rep.Body, nil
}

// PopOptions is a pop (SPEC.md §4); zero values take the broker's defaults
// (batch 1, group __QUEUE_MODE__, no wait).
type PopOptions struct {
	Queue string `json:"queue"`
	// Partition is empty for any partition of the queue.
	Partition string `json:"partition,omitempty"`
	Batch     int    `json:"batch,omitempty"`
	// Wait makes the pop a long poll of up to TimeoutMs (default 30000).
	Wait             bool   `json:"wait,omitempty"`
	TimeoutMs        int    `json:"timeout,omitempty"`
	ConsumerGroup    string `json:"consumerGroup,omitempty"`
	AutoAck          bool   `json:"autoAck,omitempty"`
	SubscriptionMode string `json:"subscriptionMode,omitempty"`
	SubscriptionFrom string `json:"subscriptionFrom,omitempty"`
	// Partitions > 1 lets a pop of any partition claim up to that many
	// partitions under one lease (default 1, at most 100: a larger value is
	// answered 400 invalid_field; SPEC.md §4, README "partitions=N"); each
	// message names its partition.
	Partitions int `json:"partitions,omitempty"`
}

// Pop pops messages (queen.v1.pop, GET /api/v1/pop/queue/...); a result with no messages means nothing was available
// (HTTP 204). A long poll's request timeout is its TimeoutMs plus 10 s
// unless ctx ends sooner.
//
// The names are checked first, as the broker checks them
// (queen.ValidateName: invalid_utf8, control_character, too_long): a name
// the broker would refuse is refused here and nothing is sent.
func (c *Client) Pop(ctx context.Context, opts PopOptions) (queen.PopResult, error) {
	var res queen.PopResult
	for _, n := range [...]struct{ v, field string }{{opts.Queue, "queue"}, {opts.Partition, "partition"}, {opts.ConsumerGroup, "consumerGroup"}} {
		if n.v == "" && n.field != "queue" {
			continue
		}
		if err := queen.ValidateName(n.v, n.field); err != nil {
			return res, err
		}
	}
	body, err := json.Marshal(opts)
	if err != nil {
		return res, err
	}
	if opts.Wait {
		wait := queen.DefaultPopTimeout
		if opts.TimeoutMs > 0 {
			wait = time.Duration(opts.TimeoutMs) * time.Millisecond
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, wait+10*time.Second)
		defer cancel()
	}
	rep, err := c.Do(ctx, &Request{Subject: wire.SubjectPop, Method: http.MethodGet, Path: popPath(opts), NATSBody: body})
	if err != nil {
		return res, err
	}
	if len(rep.Body) == 0 { // 204, or an empty NATS reply: nothing available
		return res, nil
	}
	if err := json.Unmarshal(rep.Body, &res); err != nil {
		return res, queen.ErrInternal.With("the pop reply does not decode: %v", err)
	}
	return res, nil
}

// popPath is the HTTP route of a pop: GET /api/v1/pop/queue/{queue}
// [/partition/{partition}] with the other fields in the query (SPEC.md §4).
func popPath(o PopOptions) string {
	p := "/api/v1/pop/queue/" + url.PathEscape(o.Queue)
	if o.Partition != "" {
		p += "/partition/" + url.PathEscape(o.Partition)
	}
	q := url.Values{}
	for _, kv := range [...]struct {
		k string
		v int
	}{{"batch", o.Batch}, {"timeout", o.TimeoutMs}, {"partitions", o.Partitions}} {
		if kv.v > 0 {
			q.Set(kv.k, strconv.Itoa(kv.v))
		}
	}
	for _, kv := range [...]struct {
		k string
		v bool
	}{{"wait", o.Wait}, {"autoAck", o.AutoAck}} {
		if kv.v {
			q.Set(kv.k, "true")
		}
	}
	for _, kv := range [...]struct{ k, v string }{{"consumerGroup", o.ConsumerGroup}, {"subscriptionMode", o.SubscriptionMode}, {"subscriptionFrom", o.SubscriptionFrom}} {
		if kv.v != "" {
			q.Set(kv.k, kv.v)
		}
	}
	if len(q) == 0 {
		return p
	}
	return p + "?" + q.Encode()
}

// Ack is one acknowledgement: the message by TransactionID or Offset, in
// PartitionID. Status is completed (default), failed, dlq or retry.
type Ack struct {
	TransactionID string `json:"transactionId,omitempty"`
	PartitionID   string `json:"partitionId"`
	Offset        *int64 `json:"offset,omitempty"`
	LeaseID       string `json:"leaseId,omitempty"`
	Status        string `json:"status,omitempty"`
	Error         string `json:"error,omitempty"`
	ConsumerGroup string `json:"consumerGroup,omitempty"`
}

// validate checks the ack's text as the broker does; i is its index in the
// batch (-1 alone).
func (a *Ack) validate(i int) error {
	prefix := ""
	if i >= 0 {
		prefix = "acknowledgments[" + strconv.Itoa(i) + "]."
	}
	var err error
	if a.TransactionID != "" {
		err = queen.ValidateTransactionID(a.TransactionID, prefix+"transactionId")
	}
	if err == nil && a.ConsumerGroup != "" {
		err = queen.ValidateName(a.ConsumerGroup, prefix+"consumerGroup")
	}
	if e, ok := err.(*queen.Error); ok && i >= 0 {
		e.Index = &i
	}
	return err
}

// AckFor returns the completed ack of a popped message, addressed by its
// offset (which never ages out) and carrying its lease.
func AckFor(m queen.Message) Ack {
	off := m.Offset
	a := Ack{TransactionID: m.TransactionID, PartitionID: m.PartitionID, Offset: &off, Status: string(queen.AckCompleted), ConsumerGroup: m.ConsumerGroup}
	if m.LeaseID != nil {
		a.LeaseID = *m.LeaseID
	}
	return a
}

// Ack sends acks in one call (queen.v1.ack.batch, POST /api/v1/ack/batch); group applies to acks
// that name none. The results are in request order. Transaction ids and
// group names the broker would refuse for their text (invalid UTF-8, a
// control character, ...) are refused here with the broker's error, naming
// "acknowledgments[i].transactionId", and nothing is sent.
func (c *Client) Ack(ctx context.Context, group string, acks []Ack) ([]queen.AckResult, error) {
	if group != "" {
		if err := queen.ValidateName(group, "consumerGroup"); err != nil {
			return nil, err
		}
	}
	for i := range acks {
		if err := acks[i].validate(i); err != nil {
			return nil, err
		}
	}
	body, err := json.Marshal(struct {
		Acks          []Ack  `json:"acknowledgments"`
		ConsumerGroup string `json:"consumerGroup,omitempty"`
	}{acks, group})
	if err != nil {
		return nil, err
	}
	var out []queen.AckResult
	_, err = c.call(ctx, &Request{Subject: wire.SubjectAckBatch, Method: http.MethodPost, Path: "/api/v1/ack/batch", Body: body}, &out)
	return out, err
}

// ExtendLease extends a live lease by seconds (0: the queue's leaseTime;
// queen.v1.lease.extend, POST /api/v1/lease/{lease}/extend) and returns its
// new expiry; a lease that is not live is queen.ErrLeaseInvalid (409).
func (c *Client) ExtendLease(ctx context.Context, leaseID string, seconds int) (time.Time, error) {
	nb, _ := json.Marshal(wire.LeaseExtendRequest{LeaseID: leaseID, Seconds: seconds})
	hb, _ := json.Marshal(struct {
		Seconds int `json:"seconds"`
	}{seconds})
	var out wire.LeaseReply
	_, err := c.call(ctx, &Request{Subject: wire.SubjectLeaseExtend, Method: http.MethodPost,
		Path: "/api/v1/lease/" + url.PathEscape(leaseID) + "/extend", Body: hb, NATSBody: nb}, &out)
	return out.NewExpiresAt, err
}

// ConsumeOptions configures Consume. Pop fields as in PopOptions; Wait is
// always on.
type ConsumeOptions struct {
	PopOptions
	// OnAckError, when set, sees acks the broker did not apply as asked
	// (results other than acked, retry_scheduled for failures, dead_lettered).
	OnAckError func(queen.AckResult)
}

// Consume long-polls opts.Queue until ctx ends and calls handler for each
// message in order; a nil error acks the message completed, an error acks it
// failed with the error's text (so it is redelivered, and dead-lettered past
// the queue's retryLimit). The acks of one popped batch go in one call, in
// offset order; a failure stops the cursor below it (SPEC.md §4), so the
// later messages of the batch are redelivered too. It returns ctx's error, or
// the first request error that is not retryable.
func (c *Client) Consume(ctx context.Context, opts ConsumeOptions, handler func(context.Context, queen.Message) error) error {
	pop := opts.PopOptions
	pop.Wait = true
	if pop.TimeoutMs <= 0 {
		pop.TimeoutMs = 5000
	}
	for ctx.Err() == nil {
		res, err := c.Pop(ctx, pop)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			if qe := queen.AsError(err); !qe.Retryable {
				return err
			}
			continue
		}
		if len(res.Messages) == 0 {
			continue
		}
		acks := make([]Ack, 0, len(res.Messages))
		for _, m := range res.Messages {
			a := AckFor(m)
			if herr := handler(ctx, m); herr != nil {
				a.Status = string(queen.AckFailed)
				a.Error = herr.Error()
				acks = append(acks, a)
				break // the cursor stops below a failure: the rest is redelivered
			}
			acks = append(acks, a)
		}
		results, err := c.Ack(context.WithoutCancel(ctx), pop.ConsumerGroup, acks)
		if err != nil {
			if qe := queen.AsError(err); !qe.Retryable {
				return err
			}
			continue // the lease runs out and the span is redelivered
		}
		if opts.OnAckError != nil {
			for _, r := range results {
				if !r.Success {
					opts.OnAckError(r)
				}
			}
		}
	}
	return ctx.Err()
}
