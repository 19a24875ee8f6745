package wire

import (
	"fmt"
	"net/url"
	"time"

	"github.com/queen-mq/queen-go"
)

// DecodeDedupQuery validates the inspector's HTTP query string
// (?queue=&partition=&transactionId=).
func DecodeDedupQuery(q url.Values) (DedupQuery, error) {
	get := func(k string) *string {
		if v, ok := q[k]; ok && len(v) > 0 {
			return &v[len(v)-1]
		}
		return nil
	}
	return dedupQuery(get("queue"), get("partition"), get("transactionId"))
}

// DecodeDedup validates the inspector's NATS body
// {"queue","partition","transactionId"}.
func DecodeDedup(body []byte) (DedupQuery, error) {
	var in struct {
		Queue         *string `json:"queue"`
		Partition     *string `json:"partition"`
		TransactionID *string `json:"transactionId"`
	}
	if err := DecodeObject(body, &in); err != nil {
		return DedupQuery{}, err
	}
	return dedupQuery(in.Queue, in.Partition, in.TransactionID)
}

// dedupQuery checks the inspector's fields: queue and transactionId are
// required and not empty; partition defaults to DefaultPartition when absent
// or empty, as in a push (SPEC.md §1). Names and ids follow the push's rules
// (SPEC.md §10): 400 missing_field, invalid_utf8, control_character,
// too_long.
func dedupQuery(queue, partition, txn *string) (DedupQuery, error) {
	var d DedupQuery
	if queue == nil || *queue == "" {
		return d, fieldErr(queen.ErrMissingField.With("queue is required"), "queue")
	}
	if txn == nil || *txn == "" {
		return d, fieldErr(queen.ErrMissingField.With("transactionId is required (the id whose window to inspect)"), "transactionId")
	}
	d.Queue, d.TransactionID, d.Partition = *queue, *txn, queen.DefaultPartition
	if partition != nil && *partition != "" {
		d.Partition = *partition
	}
	if err := queen.ValidateName(d.Queue, "queue"); err != nil {
		return d, err
	}
	if err := queen.ValidateName(d.Partition, "partition"); err != nil {
		return d, err
	}
	if err := queen.ValidateTransactionID(d.TransactionID, "transactionId"); err != nil {
		return d, err
	}
	d.Hash = queen.HashTxn(d.TransactionID)
	return d, nil
}

// DecodeCacheSwitch reads the body of POST /api/v1/admin/dedup-cache,
// {"enabled":true|false}, with DecodeObject's checks: 400 missing_field
// without enabled.
func DecodeCacheSwitch(body []byte) (bool, error) {
	var in struct {
		Enabled *bool `json:"enabled"`
	}
	if err := DecodeObject(body, &in); err != nil {
		return false, err
	}
	if in.Enabled == nil {
		return false, fieldErr(queen.ErrMissingField.With("enabled is required (true or false)"), "enabled")
	}
	return *in.Enabled, nil
}

// DecodeReplay validates a DLQ replay body (SPEC.md §13):
// {"queue","consumerGroup","ids":[...]} or {"queue","consumerGroup",
// "partition","from","to","limit"}. queue is required; ids (1 to
// MaxReplayIDs positive integers) exclude the filter fields; limit is 1 to
// MaxReplayIDs (default DefaultReplayLimit); from and to are RFC 3339
// times. Errors are 400s naming the field.
func DecodeReplay(body []byte) (ReplayRequest, error) {
	var in struct {
		Queue         *string  `json:"queue"`
		ConsumerGroup *string  `json:"consumerGroup"`
		IDs           *[]int64 `json:"ids"`
		Partition     *string  `json:"partition"`
		From          *string  `json:"from"`
		To            *string  `json:"to"`
		Limit         *int     `json:"limit"`
	}
	var r ReplayRequest
	if err := DecodeObject(body, &in); err != nil {
		return r, err
	}
	if in.Queue == nil || *in.Queue == "" {
		return r, fieldErr(queen.ErrMissingField.With("queue is required"), "queue")
	}
	r.Queue = *in.Queue
	if err := queen.ValidateName(r.Queue, "queue"); err != nil {
		return r, err
	}
	if in.ConsumerGroup != nil && *in.ConsumerGroup != "" {
		r.ConsumerGroup = *in.ConsumerGroup
		if err := queen.ValidateName(r.ConsumerGroup, "consumerGroup"); err != nil {
			return r, err
		}
	}
	if in.IDs != nil {
		if in.Partition != nil || in.From != nil || in.To != nil || in.Limit != nil {
			return r, fieldErr(queen.ErrInvalidField.With("ids and a filter (partition, from, to, limit) exclude each other"), "ids")
		}
		if len(*in.IDs) == 0 || len(*in.IDs) > MaxReplayIDs {
			return r, fieldErr(queen.ErrInvalidField.With("ids must hold 1 to %d dead letter ids, got %d", MaxReplayIDs, len(*in.IDs)), "ids")
		}
		for i, id := range *in.IDs {
			if id <= 0 {
				return r, fieldErr(queen.ErrInvalidField.With("ids[%d] must be a dead letter id (a positive integer), got %d", i, id), fmt.Sprintf("ids[%d]", i))
			}
		}
		r.IDs = *in.IDs
		return r, nil
	}
	if in.Partition != nil && *in.Partition != "" {
		r.Partition = *in.Partition
		if err := queen.ValidateName(r.Partition, "partition"); err != nil {
			return r, err
		}
	}
	for _, t := range []struct {
		v    *string
		dst  **time.Time
		name string
	}{{in.From, &r.From, "from"}, {in.To, &r.To, "to"}} {
		if t.v == nil {
			continue
		}
		ts, err := time.Parse(time.RFC3339Nano, *t.v)
		if err != nil {
			return r, fieldErr(queen.ErrInvalidField.With("%s must be an RFC 3339 time, got %q", t.name, *t.v), t.name)
		}
		*t.dst = &ts
	}
	r.Limit = DefaultReplayLimit
	if in.Limit != nil {
		if *in.Limit < 1 || *in.Limit > MaxReplayIDs {
			return r, fieldErr(queen.ErrInvalidField.With("limit must be 1 to %d, got %d", MaxReplayIDs, *in.Limit), "limit")
		}
		r.Limit = *in.Limit
	}
	return r, nil
}
