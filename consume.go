package queen

import (
	"bytes"
	"encoding/json"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
)

// DefaultConsumerGroup is the consumer group of a pop or ack that names none
// (SPEC.md §4): "queue mode", one group shared by every plain consumer.
const DefaultConsumerGroup = "__QUEUE_MODE__"

// Pop limits.
const (
	// MaxPopBatch is the largest batch one pop returns.
	MaxPopBatch = 10000
	// DefaultPopTimeout is a long poll's timeout when the request names none (SPEC.md §4).
	DefaultPopTimeout = 30 * time.Second
	// MaxPopPartitions is the most partitions one pop may claim.
	MaxPopPartitions = 100
	// MaxPopReplyBytes bounds the payload bytes of one pop reply (a pop
	// returns fewer messages than its batch rather than exceed it; the first
	// message is always returned): 16 MiB less room for the envelope, so a
	// reply fits the embedded NATS server's max_payload (SPEC.md §11).
	MaxPopReplyBytes = MaxBodyBytes - 64<<10
	// MaxPopTimeout bounds a long poll.
	MaxPopTimeout = 10 * time.Minute
)

// PopRequest is a validated pop (SPEC.md §4).
type PopRequest struct {
	// Queue is the queue to pop; empty with Namespace and/or Task: any
	// queue carrying those labels (SPEC.md §6).
	Queue     string
	Namespace string
	Task      string
	// Partition is empty for a pop from any partition of the queue.
	Partition string
	// Batch is the most messages returned, 1..MaxPopBatch (default 1).
	Batch int
	// Wait makes the pop a long poll of up to Timeout.
	Wait    bool
	Timeout time.Duration
	// ConsumerGroup defaults to DefaultConsumerGroup.
	ConsumerGroup string
	// AutoAck commits the cursor past the returned messages at once (no lease).
	AutoAck bool
	// SubscriptionFrom, when set, is where a group that meets a partition for
	// the first time starts: the first message stored at or after it.
	// subscriptionMode "new" (or subscriptionFrom "now") sets it to the
	// moment of the group's first pop of the queue. Nil: from the oldest
	// stored message. A group's subscription point is fixed by its first pop
	// of the queue; later requests do not move it (seek does).
	SubscriptionFrom *time.Time
	// SubscriptionNew is subscriptionMode "new": start at the group's first pop.
	SubscriptionNew bool
	// Partitions is the most partitions one pop of any partition may claim
	// (query "partitions", upstream Queen's v4 multi-partition pop), default
	// 1; larger values are capped at MaxPopPartitions, negative ones refused. Batch stays the cap on all messages
	// returned; every claimed partition is leased under one leaseId, and
	// every message carries its own partition, partitionId and leaseId. A
	// pop of one named partition ignores it.
	Partitions int
}

// Message is one popped message, field names as the Queen wire format (SPEC.md §4).
type Message struct {
	ID            string          `json:"id"`
	TransactionID string          `json:"transactionId"`
	TraceID       *string         `json:"traceId"`
	Data          json.RawMessage `json:"data"`
	CreatedAt     time.Time       `json:"createdAt"`
	PartitionID   string          `json:"partitionId"`
	Partition     string          `json:"partition"`
	Queue         string          `json:"queue"`
	Offset        int64           `json:"offset"`
	LeaseID       *string         `json:"leaseId"`
	ConsumerGroup string          `json:"consumerGroup"`
	// RetryCount is how many times this message failed before this delivery.
	RetryCount int `json:"retryCount"`
}

// PopResult is a pop's answer: no messages means HTTP 204.
type PopResult struct {
	Messages []Message `json:"messages"`
	// LeaseID is the lease on the returned span (nil with autoAck); a
	// multi-partition pop leases every claimed partition under it. Queue,
	// Partition and PartitionID name the first claimed partition.
	LeaseID        *string    `json:"leaseId"`
	LeaseExpiresAt *time.Time `json:"leaseExpiresAt,omitempty"`
	Queue          string     `json:"queue,omitempty"`
	Partition      string     `json:"partition,omitempty"`
	PartitionID    string     `json:"partitionId,omitempty"`
	ConsumerGroup  string     `json:"consumerGroup,omitempty"`
	// PartitionsClaimed is how many partitions the messages come from.
	PartitionsClaimed int `json:"partitionsClaimed,omitempty"`
}

// AckStatus is what an ack says of a message (SPEC.md §4).
type AckStatus string

// The ack statuses; "success" is accepted as an alias of completed.
const (
	AckCompleted AckStatus = "completed"
	AckFailed    AckStatus = "failed"
	AckDLQ       AckStatus = "dlq"
	AckRetry     AckStatus = "retry"
)

// AckOutcome is the machine-readable result of one ack item (SPEC.md §4).
type AckOutcome string

// The ack outcomes.
const (
	// Acked: the cursor is at or past the message.
	Acked AckOutcome = "acked"
	// Unresolvable: the transactionId is not in the sidecar (never pushed to
	// that partition, or aged out), or the offset was never allocated.
	Unresolvable AckOutcome = "unresolvable"
	// Stale: at or below the cursor already; nothing changed.
	Stale AckOutcome = "stale"
	// LeaseInvalid: the leaseId is not the partition's live lease for the group.
	LeaseInvalid AckOutcome = "lease_invalid"
	// RetryScheduled: the message will be delivered again.
	RetryScheduled AckOutcome = "retry_scheduled"
	// DeadLettered: the message was copied to the DLQ and the cursor moved past it.
	DeadLettered AckOutcome = "dead_lettered"
)

// AckItem is one validated ack: a message addressed by TransactionID or by
// Offset, in PartitionID, for ConsumerGroup.
type AckItem struct {
	TransactionID string
	// Hash is HashTxn(TransactionID) when TransactionID is set.
	Hash        Hash
	PartitionID uuid.UUID
	// Offset is >= 0 when the ack addresses the message by offset; -1 otherwise.
	Offset        int64
	LeaseID       *uuid.UUID
	Status        AckStatus
	Error         string
	ConsumerGroup string
}

// AckResult is the answer for one ack item, in request order.
type AckResult struct {
	Index int `json:"index"`
	// Success is the Queen-compatible flag: the ack did what it asked.
	Success       bool       `json:"success"`
	Result        AckOutcome `json:"result"`
	TransactionID string     `json:"transactionId,omitempty"`
	PartitionID   string     `json:"partitionId"`
	// Offset is the resolved offset, when known.
	Offset *int64 `json:"offset,omitempty"`
	// Cursor is the group's cursor after the call.
	Cursor *int64 `json:"cursor,omitempty"`
	Error  string `json:"error,omitempty"`
}

// DeadLetter is one DLQ row (SPEC.md §2).
type DeadLetter struct {
	ID            int64           `json:"id"`
	Queue         string          `json:"queue"`
	Partition     string          `json:"partition"`
	PartitionID   string          `json:"partitionId"`
	ConsumerGroup string          `json:"consumerGroup"`
	Offset        int64           `json:"offset"`
	MessageID     string          `json:"messageId"`
	TransactionID string          `json:"transactionId"`
	TraceID       *string         `json:"traceId"`
	Data          json.RawMessage `json:"data"`
	Error         string          `json:"error"`
	Attempts      int             `json:"attempts"`
	CreatedAt     time.Time       `json:"createdAt"`
	DeadAt        time.Time       `json:"deadLetteredAt"`
	// ErrorMessage repeats Error, and RetryCount is Attempts - 1 (the
	// deliveries after the first), under the names upstream Queen SDKs read.
	ErrorMessage string `json:"errorMessage"`
	RetryCount   int    `json:"retryCount"`
}

// DLQFilter selects dead letters: by queue, group and partition name ("" =
// any), dead-lettered in [From, To] when set; Limit rows from row Offset.
type DLQFilter struct {
	Queue, ConsumerGroup, Partition string
	From, To                        *time.Time
	Limit, Offset                   int
}

// ErrLeaseInvalid answers a lease extension of a lease that is not live.
var ErrLeaseInvalid = reg(409, "lease_invalid", false, "the lease is not live")

// DecodePopQuery validates an HTTP pop: the path's queue and partition (""
// for any) and the query string (SPEC.md §4). Unknown query keys are ignored.
func DecodePopQuery(queue, partition string, q url.Values) (PopRequest, error) {
	get := func(k string) (string, bool) {
		v, ok := q[k]
		if !ok || len(v) == 0 {
			return "", false
		}
		return v[len(v)-1], true
	}
	in := popInput{Queue: queue, Partition: partition}
	var err error
	if v, ok := get("batch"); ok {
		if in.Batch, err = popInt(v, "batch"); err != nil {
			return PopRequest{}, err
		}
	}
	if v, ok := get("partitions"); ok {
		if in.Partitions, err = popInt(v, "partitions"); err != nil {
			return PopRequest{}, err
		}
	}
	if v, ok := get("timeout"); ok {
		var ms int
		if ms, err = popInt(v, "timeout"); err != nil {
			return PopRequest{}, err
		}
		in.Timeout = &ms
	}
	for _, b := range []struct {
		k string
		p *bool
	}{{"wait", &in.Wait}, {"autoAck", &in.AutoAck}} {
		if v, ok := get(b.k); ok {
			switch strings.ToLower(v) {
			case "true", "1", "":
				*b.p = true
			case "false", "0":
			default:
				return PopRequest{}, fieldErr(ErrInvalidField.With("%s must be true or false, got %q", b.k, v), b.k)
			}
		}
	}
	in.ConsumerGroup, _ = get("consumerGroup")
	in.Namespace, _ = get("namespace")
	in.Task, _ = get("task")
	in.SubscriptionMode, _ = get("subscriptionMode")
	in.SubscriptionFrom, _ = get("subscriptionFrom")
	return in.validate()
}

// DecodePop validates a NATS pop body: a JSON object with the HTTP pop's
// fields, {"queue","partition","batch","wait","timeout","consumerGroup",
// "autoAck","subscriptionMode","subscriptionFrom","partitions"}.
func DecodePop(body []byte) (PopRequest, error) {
	var in popInput
	if err := DecodeObject(body, &in); err != nil {
		return PopRequest{}, err
	}
	return in.validate()
}

type popInput struct {
	Queue            string `json:"queue"`
	Namespace        string `json:"namespace"`
	Task             string `json:"task"`
	Partition        string `json:"partition"`
	Batch            int    `json:"batch"`
	Wait             bool   `json:"wait"`
	Timeout          *int   `json:"timeout"`
	ConsumerGroup    string `json:"consumerGroup"`
	AutoAck          bool   `json:"autoAck"`
	SubscriptionMode string `json:"subscriptionMode"`
	SubscriptionFrom string `json:"subscriptionFrom"`
	Partitions       int    `json:"partitions"`
}

func popInt(v, field string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fieldErr(ErrInvalidField.With("%s must be a whole number, got %q", field, v), field)
	}
	return n, nil
}

func (in popInput) validate() (PopRequest, error) {
	r := PopRequest{Queue: in.Queue, Namespace: in.Namespace, Task: in.Task, Partition: in.Partition, Batch: in.Batch, Wait: in.Wait,
		ConsumerGroup: in.ConsumerGroup, AutoAck: in.AutoAck, Timeout: DefaultPopTimeout}
	switch {
	case r.Queue != "":
		if err := ValidateName(r.Queue, "queue"); err != nil {
			return r, err
		}
	case r.Namespace == "" && r.Task == "":
		return r, fieldErr(ErrMissingField.With("queue is required (or namespace and/or task, to pop any queue with those labels)"), "queue")
	case r.Partition != "":
		return r, fieldErr(ErrInvalidField.With("a partition needs a queue"), "partition")
	}
	for _, l := range []struct{ v, f string }{{r.Namespace, "namespace"}, {r.Task, "task"}} {
		if l.v != "" {
			if err := ValidateName(l.v, l.f); err != nil {
				return r, err
			}
		}
	}
	if r.Partition != "" {
		if err := ValidateName(r.Partition, "partition"); err != nil {
			return r, err
		}
	}
	if r.ConsumerGroup == "" {
		r.ConsumerGroup = DefaultConsumerGroup
	} else if err := ValidateName(r.ConsumerGroup, "consumerGroup"); err != nil {
		return r, err
	}
	switch {
	case r.Batch == 0:
		r.Batch = 1
	case r.Batch < 0 || r.Batch > MaxPopBatch:
		return r, fieldErr(ErrInvalidField.With("batch must be 1 to %d (0 or absent: 1), got %d", MaxPopBatch, r.Batch), "batch")
	}
	switch {
	case in.Partitions == 0:
		r.Partitions = 1
	case in.Partitions < 0:
		return r, fieldErr(ErrInvalidField.With("partitions must be 1 or more (0 or absent: 1), got %d", in.Partitions), "partitions")
	case in.Partitions > MaxPopPartitions:
		r.Partitions = MaxPopPartitions
	default:
		r.Partitions = in.Partitions
	}
	if in.Timeout != nil {
		ms := *in.Timeout
		if ms < 0 || time.Duration(ms)*time.Millisecond > MaxPopTimeout {
			return r, fieldErr(ErrInvalidField.With("timeout must be 0 to %d ms, got %d", MaxPopTimeout.Milliseconds(), ms), "timeout")
		}
		r.Timeout = time.Duration(ms) * time.Millisecond
	}
	switch in.SubscriptionMode {
	case "", "all":
	case "new", "new-only":
		r.SubscriptionNew = true
	default:
		return r, fieldErr(ErrInvalidField.With("subscriptionMode must be \"all\", \"new\" or \"new-only\", got %q", in.SubscriptionMode), "subscriptionMode")
	}
	switch in.SubscriptionFrom {
	case "":
	case "now":
		if in.SubscriptionMode == "all" {
			return r, fieldErr(ErrInvalidField.With("give subscriptionMode all or subscriptionFrom, not both"), "subscriptionFrom")
		}
		r.SubscriptionNew = true
	default:
		t, err := time.Parse(time.RFC3339Nano, in.SubscriptionFrom)
		if err != nil {
			return r, fieldErr(ErrInvalidField.With("subscriptionFrom must be \"now\" or an RFC 3339 time, got %q", in.SubscriptionFrom), "subscriptionFrom")
		}
		if r.SubscriptionNew || in.SubscriptionMode == "all" {
			return r, fieldErr(ErrInvalidField.With("give subscriptionMode or a subscriptionFrom time, not both"), "subscriptionFrom")
		}
		r.SubscriptionFrom = &t
	}
	return r, nil
}

// ackInput is one ack on the wire (Queen's ackRequest).
type ackInput struct {
	TransactionID *string `json:"transactionId"`
	PartitionID   *string `json:"partitionId"`
	Offset        *int64  `json:"offset"`
	LeaseID       *string `json:"leaseId"`
	Status        *string `json:"status"`
	Error         *string `json:"error"`
	ConsumerGroup *string `json:"consumerGroup"`
}

// DecodeAck validates a single ack body {"transactionId"|"offset",
// "partitionId","leaseId","status","error","consumerGroup"} (SPEC.md §4).
func DecodeAck(body []byte) (AckItem, error) {
	var a ackInput
	if err := DecodeObject(body, &a); err != nil {
		return AckItem{}, err
	}
	return a.validate(-1, "", "")
}

// DecodeAckBatch validates {"acknowledgments":[ack, ...], "consumerGroup":g}:
// an item without its own consumerGroup takes the body's. At most MaxItems.
func DecodeAckBatch(body []byte) ([]AckItem, error) {
	var in struct {
		Acks          *[]ackInput `json:"acknowledgments"`
		ConsumerGroup *string     `json:"consumerGroup"`
	}
	if err := DecodeObject(body, &in); err != nil {
		return nil, err
	}
	if in.Acks == nil {
		return nil, fieldErr(ErrMissingField.With("acknowledgments is required (an array of acks)"), "acknowledgments")
	}
	if len(*in.Acks) > MaxItems {
		return nil, fieldErr(ErrTooManyItems.With("%d acknowledgments; the limit is %d", len(*in.Acks), MaxItems), "acknowledgments")
	}
	group := ""
	if in.ConsumerGroup != nil {
		group = *in.ConsumerGroup
	}
	out := make([]AckItem, len(*in.Acks))
	for i, a := range *in.Acks {
		it, err := a.validate(i, "acknowledgments["+strconv.Itoa(i)+"].", group)
		if err != nil {
			return nil, err
		}
		out[i] = it
	}
	return out, nil
}

func (a ackInput) validate(idx int, prefix, group string) (AckItem, error) {
	bad := func(e *Error, field string) (AckItem, error) {
		if idx >= 0 {
			return AckItem{}, e.At(idx, prefix+field)
		}
		return AckItem{}, fieldErr(e, field)
	}
	it := AckItem{Offset: -1, Status: AckCompleted, ConsumerGroup: group}
	if a.PartitionID == nil || *a.PartitionID == "" {
		return bad(ErrMissingField.With("%spartitionId is required (the partitionId of the popped message)", prefix), "partitionId")
	}
	pid, err := uuid.Parse(*a.PartitionID)
	if err != nil {
		return bad(ErrInvalidField.With("%spartitionId must be a UUID, got %q", prefix, *a.PartitionID), "partitionId")
	}
	it.PartitionID = pid
	switch {
	case a.Offset != nil:
		if *a.Offset < 0 {
			return bad(ErrInvalidField.With("%soffset must be >= 0, got %d", prefix, *a.Offset), "offset")
		}
		it.Offset = *a.Offset
		if a.TransactionID != nil {
			it.TransactionID = *a.TransactionID
		}
	case a.TransactionID != nil && *a.TransactionID != "":
		if e := checkText(*a.TransactionID, MaxTransactionIDBytes, prefix+"transactionId"); e != nil {
			if idx >= 0 {
				e.Index = &idx
			}
			return AckItem{}, e
		}
		it.TransactionID = *a.TransactionID
		it.Hash = HashTxn(it.TransactionID)
	default:
		return bad(ErrMissingField.With("%stransactionId or offset is required", prefix), "transactionId")
	}
	if a.LeaseID != nil && *a.LeaseID != "" {
		l, err := uuid.Parse(*a.LeaseID)
		if err != nil {
			return bad(ErrInvalidField.With("%sleaseId must be a UUID, got %q", prefix, *a.LeaseID), "leaseId")
		}
		it.LeaseID = &l
	}
	if a.Status != nil {
		switch s := AckStatus(*a.Status); s {
		case AckCompleted, AckFailed, AckDLQ, AckRetry:
			it.Status = s
		case "success":
			it.Status = AckCompleted
		default:
			return bad(ErrInvalidField.With("%sstatus must be completed, success, failed, dlq or retry, got %q", prefix, *a.Status), "status")
		}
	}
	if a.Error != nil {
		it.Error = *a.Error
	}
	if a.ConsumerGroup != nil && *a.ConsumerGroup != "" {
		it.ConsumerGroup = *a.ConsumerGroup
	}
	if it.ConsumerGroup == "" {
		it.ConsumerGroup = DefaultConsumerGroup
	} else if e := validateName(it.ConsumerGroup, prefix+"consumerGroup"); e != nil {
		if idx >= 0 {
			e.Index = &idx
		}
		return AckItem{}, e
	}
	return it, nil
}

// DecodeLeaseExtend validates {"seconds":N} (N > 0; absent or 0 means the
// queue's leaseTime, as Queen clients send {}).
func DecodeLeaseExtend(body []byte) (int64, error) {
	var in struct {
		Seconds *int64 `json:"seconds"`
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return 0, nil
	}
	if err := DecodeObject(body, &in); err != nil {
		return 0, err
	}
	if in.Seconds == nil {
		return 0, nil
	}
	if *in.Seconds < 0 || *in.Seconds > 1<<31-1 {
		return 0, fieldErr(ErrInvalidField.With("seconds must be 0 to %d, got %d", int64(1<<31-1), *in.Seconds), "seconds")
	}
	return *in.Seconds, nil
}

// SeekRequest moves a consumer group's cursors on one queue: to the end, to
// the beginning, or to just before the first message stored at or after
// Timestamp.
type SeekRequest struct {
	ToEnd       bool
	ToBeginning bool
	Timestamp   *time.Time
}

// DecodeSeek validates {"toEnd":true}, {"timestamp":"<RFC 3339>"} or, as
// upstream SDKs send, {"mode":"end"|"beginning"}.
func DecodeSeek(body []byte) (SeekRequest, error) {
	var in struct {
		ToEnd     bool    `json:"toEnd"`
		Timestamp *string `json:"timestamp"`
		Mode      *string `json:"mode"`
	}
	if err := DecodeObject(body, &in); err != nil {
		return SeekRequest{}, err
	}
	var r SeekRequest
	if in.Mode != nil {
		switch {
		case in.ToEnd || in.Timestamp != nil:
			return r, fieldErr(ErrInvalidField.With("give mode, toEnd or timestamp, not several"), "mode")
		case *in.Mode == "end":
			return SeekRequest{ToEnd: true}, nil
		case *in.Mode == "beginning":
			return SeekRequest{ToBeginning: true}, nil
		default:
			return r, fieldErr(ErrInvalidField.With("mode must be \"end\" or \"beginning\", got %q", *in.Mode), "mode")
		}
	}
	switch {
	case in.ToEnd && in.Timestamp != nil:
		return r, fieldErr(ErrInvalidField.With("give toEnd or timestamp, not both"), "timestamp")
	case in.ToEnd:
		r.ToEnd = true
	case in.Timestamp != nil:
		t, err := time.Parse(time.RFC3339Nano, *in.Timestamp)
		if err != nil {
			return r, fieldErr(ErrInvalidField.With("timestamp must be an RFC 3339 time, got %q", *in.Timestamp), "timestamp")
		}
		r.Timestamp = &t
	default:
		return r, fieldErr(ErrMissingField.With("give {\"toEnd\":true} or {\"timestamp\":\"<RFC 3339>\"}"), "toEnd")
	}
	return r, nil
}

// DecodeObject decodes a JSON object body into v with encoding/json after
// the checks every body gets (size, UTF-8, lone surrogates): *Error from the
// registry, type errors naming the field. Unknown keys are ignored.
func DecodeObject(body []byte, v any) error {
	if len(body) > MaxBodyBytes {
		return bodyTooLarge(len(body))
	}
	if e := checkEncoding(body); e != nil {
		return e
	}
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return ErrInvalidJSON.With("the body must be a JSON object")
	}
	if err := json.Unmarshal(body, v); err != nil {
		if te, ok := err.(*json.UnmarshalTypeError); ok {
			field := te.Field
			if field == "" {
				field = "body"
			}
			return fieldErr(ErrInvalidField.With("%s must be %s, got %s", field, jsonKind(te.Type), jsonValueKind(te.Value)), te.Field)
		}
		return ErrInvalidJSON.With("the request body is not valid JSON: %v", err)
	}
	return nil
}

// jsonKind names the JSON value a Go type decodes from, for error messages.
func jsonKind(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number in range"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	default:
		return "an object"
	}
}

// jsonValueKind names encoding/json's description of a JSON value.
func jsonValueKind(v string) string {
	switch {
	case v == "number" || strings.HasPrefix(v, "number "):
		return "the number " + strings.TrimPrefix(v, "number ")
	case v == "":
		return "another type"
	default:
		return "a JSON " + v
	}
}
