package transport

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"

	queen "github.com/queen-mq/queen-go"
)

// Client is a Go client of the broker's NATS API (SPEC.md §11). It is safe for
// concurrent use.
type Client struct {
	nc *nats.Conn
}

// NewClient returns a client over nc.
func NewClient(nc *nats.Conn) *Client { return &Client{nc: nc} }

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

// Push pushes items and returns one reply per item, in order. err is a
// *queen.Error for a refused request (4xx, nothing written) or a transport
// failure. When every item failed (503) the replies are returned too, with
// err matching the first item's error code.
func (c *Client) Push(ctx context.Context, items []PushItem) ([]queen.PushReply, error) {
	data, status, err := c.request(ctx, SubjectPush, AppendPushRequest(nil, items))
	if err != nil {
		return nil, err
	}
	if status == 0 || status == 503 {
		if out, jerr := queen.DecodePushReplies(data); jerr == nil {
			if status == 503 && len(out) > 0 {
				return out, queen.ErrUnavailable.With("every item failed: %s", out[0].Error)
			}
			return out, nil
		}
	}
	return nil, decodeError(data, status)
}

// AppendPushRequest appends the push body {"items":[...]} for items to dst,
// as encoding/json would write it for PushItem, without reflection. A
// non-empty Payload is written as is: it must be one JSON value (the broker
// refuses the request with 400 otherwise).
func AppendPushRequest(dst []byte, items []PushItem) []byte {
	dst = append(dst, `{"items":[`...)
	for i := range items {
		it := &items[i]
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"queue":`...)
		dst = queen.AppendJSONString(dst, it.Queue)
		if it.Partition != "" {
			dst = append(dst, `,"partition":`...)
			dst = queen.AppendJSONString(dst, it.Partition)
		}
		if it.TransactionID != "" {
			dst = append(dst, `,"transactionId":`...)
			dst = queen.AppendJSONString(dst, it.TransactionID)
		}
		if it.TraceID != "" {
			dst = append(dst, `,"traceId":`...)
			dst = queen.AppendJSONString(dst, it.TraceID)
		}
		if len(it.Payload) > 0 {
			dst = append(dst, `,"payload":`...)
			dst = append(dst, it.Payload...)
		}
		dst = append(dst, '}')
	}
	return append(dst, "]}"...)
}

// Configure configures a queue (SPEC.md §6); the reply is returned raw.
func (c *Client) Configure(ctx context.Context, body []byte) (json.RawMessage, error) {
	data, status, err := c.request(ctx, SubjectConfigure, body)
	if err != nil {
		return nil, err
	}
	if status != 0 {
		return nil, decodeError(data, status)
	}
	return data, nil
}

// request sends body and returns the reply data and its micro error status
// (0 when the reply is not an error).
func (c *Client) request(ctx context.Context, subject string, body []byte) ([]byte, int, error) {
	msg, err := c.nc.RequestWithContext(ctx, subject, body)
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			return nil, 0, queen.ErrUnavailable.With("no broker answers on %s", subject)
		}
		return nil, 0, queen.ErrTimeout.With("request on %s: %v", subject, err)
	}
	if code := msg.Header.Get("Nats-Service-Error-Code"); code != "" {
		st, _ := strconv.Atoi(code)
		if st == 0 {
			st = 500
		}
		return msg.Data, st, nil
	}
	return msg.Data, 0, nil
}

func decodeError(data []byte, status int) error {
	e := &queen.Error{}
	if err := json.Unmarshal(data, e); err != nil || e.Code == "" {
		return queen.ErrInternal.With("broker answered status %d: %s", status, data)
	}
	e.Status = status
	return fmt.Errorf("%w", e)
}
