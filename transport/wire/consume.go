package wire

import (
	"bytes"
	"encoding/json"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/queen-mq/queen-go"
)

// Pop limits (SPEC.md §4).
const (
	// MaxPopBatch is the largest batch one pop returns; a larger batch
	// is refused (400 invalid_field).
	MaxPopBatch = 10000
	// MaxPopPartitions is the most partitions one pop may claim; a larger
	// partitions is refused (400 invalid_field), like a larger batch.
	MaxPopPartitions = 100
	// MaxPopTimeout bounds a long poll.
	MaxPopTimeout = 10 * time.Minute
)

// DecodePopQuery validates an HTTP pop: the path's queue and partition (""
// for any) and the query string (SPEC.md §4). Unknown query keys are ignored.
func DecodePopQuery(queue, partition string, q url.Values) (queen.PopRequest, error) {
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
			return queen.PopRequest{}, err
		}
	}
	if v, ok := get("partitions"); ok {
		if in.Partitions, err = popInt(v, "partitions"); err != nil {
			return queen.PopRequest{}, err
		}
	}
	if v, ok := get("timeout"); ok {
		var ms int
		if ms, err = popInt(v, "timeout"); err != nil {
			return queen.PopRequest{}, err
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
				return queen.PopRequest{}, fieldErr(queen.ErrInvalidField.With("%s must be true or false, got %q", b.k, v), b.k)
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
func DecodePop(body []byte) (queen.PopRequest, error) {
	var in popInput
	if err := DecodeObject(body, &in); err != nil {
		return queen.PopRequest{}, err
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
		return 0, fieldErr(queen.ErrInvalidField.With("%s must be a whole number, got %q", field, v), field)
	}
	return n, nil
}

func (in popInput) validate() (queen.PopRequest, error) {
	r := queen.PopRequest{Queue: in.Queue, Namespace: in.Namespace, Task: in.Task, Partition: in.Partition, Batch: in.Batch, Wait: in.Wait,
		ConsumerGroup: in.ConsumerGroup, AutoAck: in.AutoAck, Timeout: queen.DefaultPopTimeout}
	switch {
	case r.Queue != "":
		if err := queen.ValidateName(r.Queue, "queue"); err != nil {
			return r, err
		}
	case r.Namespace == "" && r.Task == "":
		return r, fieldErr(queen.ErrMissingField.With("queue is required (or namespace and/or task, to pop any queue with those labels)"), "queue")
	case r.Partition != "":
		return r, fieldErr(queen.ErrInvalidField.With("a partition needs a queue"), "partition")
	}
	for _, l := range []struct{ v, f string }{{r.Namespace, "namespace"}, {r.Task, "task"}} {
		if l.v != "" {
			if err := queen.ValidateName(l.v, l.f); err != nil {
				return r, err
			}
		}
	}
	if r.Partition != "" {
		if err := queen.ValidateName(r.Partition, "partition"); err != nil {
			return r, err
		}
	}
	if r.ConsumerGroup == "" {
		r.ConsumerGroup = queen.DefaultConsumerGroup
	} else if err := queen.ValidateName(r.ConsumerGroup, "consumerGroup"); err != nil {
		return r, err
	}
	switch {
	case r.Batch == 0:
		r.Batch = 1
	case r.Batch < 0 || r.Batch > MaxPopBatch:
		return r, fieldErr(queen.ErrInvalidField.With("batch must be 1 to %d (0 or absent: 1), got %d", MaxPopBatch, r.Batch), "batch")
	}
	switch {
	case in.Partitions == 0:
		r.Partitions = 1
	case in.Partitions < 0 || in.Partitions > MaxPopPartitions:
		return r, fieldErr(queen.ErrInvalidField.With("partitions must be 1 to %d (0 or absent: 1), got %d", MaxPopPartitions, in.Partitions), "partitions")
	default:
		r.Partitions = in.Partitions
	}
	if in.Timeout != nil {
		ms := *in.Timeout
		// Compared in milliseconds: a huge ms overflows a time.Duration.
		if ms < 0 || int64(ms) > MaxPopTimeout.Milliseconds() {
			return r, fieldErr(queen.ErrInvalidField.With("timeout must be 0 to %d ms, got %d", MaxPopTimeout.Milliseconds(), ms), "timeout")
		}
		r.Timeout = time.Duration(ms) * time.Millisecond
	}
	// Upstream's rule (its parse_subscription_mode): a subscriptionFrom
	// time wins over any mode; subscriptionFrom "now" or the modes new,
	// new-only and now start at the group's first pop; any other mode
	// ("all", "from_beginning", "timestamp", ...) or none means all.
	switch in.SubscriptionFrom {
	case "":
	case "now":
		r.SubscriptionNew = true
	default:
		t, err := time.Parse(time.RFC3339Nano, in.SubscriptionFrom)
		if err != nil {
			return r, fieldErr(queen.ErrInvalidField.With("subscriptionFrom must be \"now\" or an RFC 3339 time, got %q", in.SubscriptionFrom), "subscriptionFrom")
		}
		r.SubscriptionFrom = &t
		return r, nil
	}
	switch in.SubscriptionMode {
	case "new", "new-only", "now":
		r.SubscriptionNew = true
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
func DecodeAck(body []byte) (queen.AckItem, error) {
	var a ackInput
	if err := DecodeObject(body, &a); err != nil {
		return queen.AckItem{}, err
	}
	return a.validate(-1, "", "")
}

// DecodeAckBatch validates {"acknowledgments":[ack, ...], "consumerGroup":g}:
// an item without its own consumerGroup takes the body's. At most MaxItems.
func DecodeAckBatch(body []byte) ([]queen.AckItem, error) {
	var in struct {
		Acks          *[]ackInput `json:"acknowledgments"`
		ConsumerGroup *string     `json:"consumerGroup"`
	}
	if err := DecodeObject(body, &in); err != nil {
		return nil, err
	}
	if in.Acks == nil {
		return nil, fieldErr(queen.ErrMissingField.With("acknowledgments is required (an array of acks)"), "acknowledgments")
	}
	if len(*in.Acks) > queen.MaxItems {
		return nil, fieldErr(queen.ErrTooManyItems.With("%d acknowledgments; the limit is %d", len(*in.Acks), queen.MaxItems), "acknowledgments")
	}
	group := ""
	if in.ConsumerGroup != nil {
		group = *in.ConsumerGroup
	}
	out := make([]queen.AckItem, len(*in.Acks))
	for i, a := range *in.Acks {
		it, err := a.validate(i, "acknowledgments["+strconv.Itoa(i)+"].", group)
		if err != nil {
			return nil, err
		}
		out[i] = it
	}
	return out, nil
}

func (a ackInput) validate(idx int, prefix, group string) (queen.AckItem, error) {
	bad := func(e *queen.Error, field string) (queen.AckItem, error) {
		if idx >= 0 {
			return queen.AckItem{}, e.At(idx, prefix+field)
		}
		return queen.AckItem{}, fieldErr(e, field)
	}
	it := queen.AckItem{Offset: -1, Status: queen.AckCompleted, ConsumerGroup: group}
	if a.PartitionID == nil || *a.PartitionID == "" {
		return bad(queen.ErrMissingField.With("%spartitionId is required (the partitionId of the popped message)", prefix), "partitionId")
	}
	pid, err := uuid.Parse(*a.PartitionID)
	if err != nil {
		return bad(queen.ErrInvalidField.With("%spartitionId must be a UUID, got %q", prefix, *a.PartitionID), "partitionId")
	}
	it.PartitionID = pid
	switch {
	case a.Offset != nil:
		if *a.Offset < 0 {
			return bad(queen.ErrInvalidField.With("%soffset must be >= 0, got %d", prefix, *a.Offset), "offset")
		}
		it.Offset = *a.Offset
		if a.TransactionID != nil {
			it.TransactionID = *a.TransactionID
		}
	case a.TransactionID != nil && *a.TransactionID != "":
		if e := queen.CheckText(*a.TransactionID, queen.MaxTransactionIDBytes, prefix+"transactionId"); e != nil {
			if idx >= 0 {
				e.Index = &idx
			}
			return queen.AckItem{}, e
		}
		it.TransactionID = *a.TransactionID
		it.Hash = queen.HashTxn(it.TransactionID)
	default:
		return bad(queen.ErrMissingField.With("%stransactionId or offset is required", prefix), "transactionId")
	}
	if a.LeaseID != nil && *a.LeaseID != "" {
		l, err := uuid.Parse(*a.LeaseID)
		if err != nil {
			return bad(queen.ErrInvalidField.With("%sleaseId must be a UUID, got %q", prefix, *a.LeaseID), "leaseId")
		}
		it.LeaseID = &l
	}
	if a.Status != nil {
		switch s := queen.AckStatus(*a.Status); s {
		case queen.AckCompleted, queen.AckFailed, queen.AckDLQ, queen.AckRetry:
			it.Status = s
		case "success":
			it.Status = queen.AckCompleted
		default:
			return bad(queen.ErrInvalidField.With("%sstatus must be completed, success, failed, dlq or retry, got %q", prefix, *a.Status), "status")
		}
	}
	if a.Error != nil {
		// Kept to MaxAckErrorBytes (docs/contract.md §4): the dead letter
		// stores it and the DLQ listing returns it.
		it.Error = queen.TruncateAckError(*a.Error)
	}
	if a.ConsumerGroup != nil && *a.ConsumerGroup != "" {
		it.ConsumerGroup = *a.ConsumerGroup
	}
	if it.ConsumerGroup == "" {
		it.ConsumerGroup = queen.DefaultConsumerGroup
	} else if e := validateName(it.ConsumerGroup, prefix+"consumerGroup"); e != nil {
		if idx >= 0 {
			e.Index = &idx
		}
		return queen.AckItem{}, e
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
		return 0, fieldErr(queen.ErrInvalidField.With("seconds must be 0 to %d, got %d", int64(1<<31-1), *in.Seconds), "seconds")
	}
	return *in.Seconds, nil
}

// DecodeSeek validates {"toEnd":true}, {"timestamp":"<RFC 3339>"} or, as
// upstream SDKs send, {"mode":"end"|"beginning"}.
func DecodeSeek(body []byte) (queen.SeekRequest, error) {
	var in struct {
		ToEnd     bool    `json:"toEnd"`
		Timestamp *string `json:"timestamp"`
		Mode      *string `json:"mode"`
	}
	if err := DecodeObject(body, &in); err != nil {
		return queen.SeekRequest{}, err
	}
	var r queen.SeekRequest
	if in.Mode != nil {
		switch {
		case in.ToEnd || in.Timestamp != nil:
			return r, fieldErr(queen.ErrInvalidField.With("give mode, toEnd or timestamp, not several"), "mode")
		case *in.Mode == "end":
			return queen.SeekRequest{ToEnd: true}, nil
		case *in.Mode == "beginning":
			return queen.SeekRequest{ToBeginning: true}, nil
		default:
			return r, fieldErr(queen.ErrInvalidField.With("mode must be \"end\" or \"beginning\", got %q", *in.Mode), "mode")
		}
	}
	switch {
	case in.ToEnd && in.Timestamp != nil:
		return r, fieldErr(queen.ErrInvalidField.With("give toEnd or timestamp, not both"), "timestamp")
	case in.ToEnd:
		r.ToEnd = true
	case in.Timestamp != nil:
		t, err := time.Parse(time.RFC3339Nano, *in.Timestamp)
		if err != nil {
			return r, fieldErr(queen.ErrInvalidField.With("timestamp must be an RFC 3339 time, got %q", *in.Timestamp), "timestamp")
		}
		r.Timestamp = &t
	default:
		return r, fieldErr(queen.ErrMissingField.With("give {\"toEnd\":true} or {\"timestamp\":\"<RFC 3339>\"}"), "toEnd")
	}
	return r, nil
}

// DecodeObject decodes a JSON object body into v with encoding/json after
// the checks every body gets (size, UTF-8, lone surrogates): *Error from the
// registry, type errors naming the field. Unknown keys are ignored.
func DecodeObject(body []byte, v any) error {
	if len(body) > queen.MaxBodyBytes {
		return bodyTooLarge(len(body))
	}
	if e := checkEncoding(body); e != nil {
		return e
	}
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return queen.ErrInvalidJSON.With("the body must be a JSON object")
	}
	if err := json.Unmarshal(body, v); err != nil {
		if te, ok := err.(*json.UnmarshalTypeError); ok {
			field := te.Field
			if field == "" {
				field = "body"
			}
			return fieldErr(queen.ErrInvalidField.With("%s must be %s, got %s", field, jsonKind(te.Type), jsonValueKind(te.Value)), te.Field)
		}
		return queen.ErrInvalidJSON.With("the request body is not valid JSON: %v", err)
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
