package wire

import (
	"encoding/json"
	"time"

	queen "github.com/queen-mq/queen-go"
)

// The reply bodies of the consumer and operator routes (SPEC.md §4, §6,
// §13), written by the broker (package transport) and read by the Go client
// (package transport/client): one shape per route, the same over HTTP and
// NATS.

// ConfigureReply answers a configure (SPEC.md §6: POST /api/v1/configure,
// queen.v1.configure): the queue's options after the call, the options it
// Changed (old and new values), NotEnforced the queue's options of
// queen.NotEnforcedOptions that are set (stored and echoed, not acted on),
// in that order ([] when none), and whether the call Created the queue.
type ConfigureReply struct {
	Configured  bool                    `json:"configured"`
	Queue       string                  `json:"queue"`
	Namespace   string                  `json:"namespace"`
	Task        string                  `json:"task"`
	Options     queen.Options           `json:"options"`
	Changed     map[string]queen.Change `json:"changed"`
	NotEnforced []string                `json:"notEnforced"`
	Created     bool                    `json:"created"`
}

// NewConfigureReply is the ConfigureReply of a configure's outcome.
func NewConfigureReply(res queen.ConfigureResult) ConfigureReply {
	ne := []string{}
	for _, k := range queen.NotEnforcedOptions {
		if _, ok := res.Options.NotEnforced[k]; ok {
			ne = append(ne, k)
		}
	}
	return ConfigureReply{Configured: true, Queue: res.Queue, Namespace: res.Namespace, Task: res.Task,
		Options: res.Options, Changed: res.Changed, NotEnforced: ne, Created: res.Created}
}

// LeaseReply answers a lease extension (POST /api/v1/lease/{lease}/extend,
// queen.v1.lease.extend): the lease and its new expiry (PostgreSQL's clock).
type LeaseReply struct {
	LeaseID      string    `json:"leaseId"`
	NewExpiresAt time.Time `json:"newExpiresAt"`
	Success      bool      `json:"success"`
}

// LeaseExtendRequest is queen.v1.lease.extend's body: the lease (a UUID) and
// the seconds to extend it by (0: the queue's leaseTime). Over HTTP the lease
// is in the path and the body is {"seconds":N}.
type LeaseExtendRequest struct {
	LeaseID string `json:"leaseId"`
	Seconds int    `json:"seconds"`
}

// DecodeLeaseID reads the leaseId of queen.v1.lease.extend's body (""
// when absent; the caller checks it is a UUID), with DecodeObject's checks.
// The seconds are DecodeLeaseExtend's.
func DecodeLeaseID(body []byte) (string, error) {
	var in struct {
		LeaseID string `json:"leaseId"`
	}
	err := DecodeObject(body, &in)
	return in.LeaseID, err
}

// QueueDetailRequest is queen.v1.queue.detail's body {"queue":"q"}.
type QueueDetailRequest struct {
	Queue string `json:"queue"`
}

// DecodeQueueDetail reads queen.v1.queue.detail's body {"queue":"q"}: the
// queue as sent (the caller checks the name), missing_field without it.
func DecodeQueueDetail(body []byte) (string, error) {
	var in struct {
		Queue *string `json:"queue"`
	}
	if err := DecodeObject(body, &in); err != nil {
		return "", err
	}
	if in.Queue == nil {
		return "", fieldErr(queen.ErrMissingField.With("queue is required"), "queue")
	}
	return *in.Queue, nil
}

// DecodeSubscription reads {"subscriptionTimestamp":"<RFC 3339>"} (POST
// /api/v1/consumer-groups/{group}/subscription, the upstream SDKs' call):
// missing_field without it, invalid_field when it is not an RFC 3339 time.
func DecodeSubscription(body []byte) (time.Time, error) {
	var in struct {
		TS *string `json:"subscriptionTimestamp"`
	}
	if err := DecodeObject(body, &in); err != nil {
		return time.Time{}, err
	}
	if in.TS == nil {
		return time.Time{}, fieldErr(queen.ErrMissingField.With("subscriptionTimestamp is required (an RFC 3339 time)"), "subscriptionTimestamp")
	}
	ts, err := time.Parse(time.RFC3339Nano, *in.TS)
	if err != nil {
		return time.Time{}, fieldErr(queen.ErrInvalidField.With("subscriptionTimestamp must be an RFC 3339 time, got %q", *in.TS), "subscriptionTimestamp")
	}
	return ts, nil
}

// SubscriptionReply answers a subscription timestamp: the queues whose
// cursors moved.
type SubscriptionReply struct {
	Success       bool   `json:"success"`
	ConsumerGroup string `json:"consumerGroup"`
	Queues        int    `json:"queues"`
}

// DeadLettersReply answers GET /api/v1/dlq: one page of dead letters
// (payloads included), Total matching the filter, and the page asked for.
// A page holds fewer than Limit dead letters when their frames and error
// texts reach queen.MaxDLQReplyBytes: Truncated is then true. NextOffset is
// where the next page starts (Offset + len(Messages)) while dead letters
// remain past this page, and absent on the last one.
type DeadLettersReply struct {
	Messages   []queen.DeadLetter `json:"messages"`
	Total      int64              `json:"total"`
	Limit      int                `json:"limit"`
	Offset     int                `json:"offset"`
	NextOffset *int               `json:"nextOffset,omitempty"`
	Truncated  bool               `json:"truncated,omitempty"`
}

// DeleteQueueReply answers DELETE /api/v1/resources/queues/{queue} (200
// either way): whether the queue existed, and its partitions.
type DeleteQueueReply struct {
	Deleted    bool   `json:"deleted"`
	Existed    bool   `json:"existed"`
	Queue      string `json:"queue"`
	Partitions int64  `json:"partitions"`
}

// QueuesReply answers GET /api/v1/resources/queues.
type QueuesReply struct {
	Queues []queen.QueueSummary `json:"queues"`
}

// DeleteGroupReply answers DELETE /api/v1/consumer-groups/{group}: the
// cursors removed.
type DeleteGroupReply struct {
	Deleted       bool   `json:"deleted"`
	ConsumerGroup string `json:"consumerGroup"`
	Cursors       int64  `json:"cursors"`
}

// SeekReply answers a seek: the partitions whose cursors moved.
type SeekReply struct {
	Success       bool   `json:"success"`
	ConsumerGroup string `json:"consumerGroup"`
	Queue         string `json:"queue"`
	Partitions    int    `json:"partitions"`
}

// ReplayReply answers a DLQ replay (SPEC.md §13): one result per dead letter
// selected, in request order, and the count of each outcome.
type ReplayReply struct {
	Results   []ReplayResult `json:"results"`
	Moved     int            `json:"moved"`
	Duplicate int            `json:"duplicate"`
	Gone      int            `json:"gone"`
	Failed    int            `json:"failed"`
}

// DecodeError reads a refused request's answer (SPEC.md §10): the registry
// error of its JSON body ({"error","code","index","field","retryable"}, a
// transaction's with "success":false too) with Status set to status (the
// HTTP status, over NATS the Nats-Service-Error-Code header). A body that is
// not a registry error (a proxy's page, an empty body) is queen.ErrInternal
// naming the status and the body's first 300 bytes, with Status status and
// Retryable for a 5xx. The Go client decodes every refusal here.
func DecodeError(status int, body []byte) *queen.Error {
	e := &queen.Error{}
	if err := json.Unmarshal(body, e); err != nil || e.Code == "" {
		e = queen.ErrInternal.With("the broker answered status %d: %s", status, clip(body))
		e.Retryable = status >= 500
	}
	e.Status = status
	return e
}

// clip is b as text, trimmed to 300 bytes.
func clip(b []byte) string {
	s := string(b)
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}
