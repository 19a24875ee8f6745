package wire

import (
	"math"
	"net/url"
	"strconv"

	"github.com/queen-mq/queen-go"
)

// DecodePeekQuery validates a peek's HTTP query (?partition=&after=&limit=)
// for queue (the path's {queue}): 400 missing_field for an empty queue,
// invalid_field for an after below -1 or at math.MaxInt64 (no offset follows
// it), or a limit outside 1..MaxPeekLimit (or
// not a whole number), and the name rules of SPEC.md §10 for queue and
// partition.
func DecodePeekQuery(queue string, q url.Values) (queen.PeekQuery, error) {
	get := func(k string) *string {
		if v, ok := q[k]; ok && len(v) > 0 {
			return &v[len(v)-1]
		}
		return nil
	}
	p := queen.PeekQuery{Queue: queue, Partition: queen.DefaultPartition, After: -1, Limit: queen.DefaultPeekLimit}
	if v := get("partition"); v != nil && *v != "" {
		p.Partition = *v
	}
	if v := get("after"); v != nil && *v != "" {
		n, err := strconv.ParseInt(*v, 10, 64)
		if err != nil || n < -1 || n == math.MaxInt64 {
			return p, fieldErr(queen.ErrInvalidField.With("after must be an offset, a whole number from -1 to %d, got %q", int64(math.MaxInt64-1), *v), "after")
		}
		p.After = n
	}
	if v := get("limit"); v != nil && *v != "" {
		n, err := strconv.Atoi(*v)
		if err != nil || n < 1 || n > queen.MaxPeekLimit {
			return p, fieldErr(queen.ErrInvalidField.With("limit must be a whole number from 1 to %d, got %q", queen.MaxPeekLimit, *v), "limit")
		}
		p.Limit = n
	}
	return p, checkPeek(p)
}

// DecodePeek validates a peek's NATS body
// {"queue","partition","after","limit"} (only queue is required), by the
// rules of DecodePeekQuery.
func DecodePeek(body []byte) (queen.PeekQuery, error) {
	var in struct {
		Queue     *string `json:"queue"`
		Partition *string `json:"partition"`
		After     *int64  `json:"after"`
		Limit     *int    `json:"limit"`
	}
	if err := DecodeObject(body, &in); err != nil {
		return queen.PeekQuery{}, err
	}
	p := queen.PeekQuery{Partition: queen.DefaultPartition, After: -1, Limit: queen.DefaultPeekLimit}
	if in.Queue != nil {
		p.Queue = *in.Queue
	}
	if in.Partition != nil && *in.Partition != "" {
		p.Partition = *in.Partition
	}
	if in.After != nil {
		if *in.After < -1 || *in.After == math.MaxInt64 {
			return p, fieldErr(queen.ErrInvalidField.With("after must be an offset, a whole number from -1 to %d, got %d", int64(math.MaxInt64-1), *in.After), "after")
		}
		p.After = *in.After
	}
	if in.Limit != nil {
		if *in.Limit < 1 || *in.Limit > queen.MaxPeekLimit {
			return p, fieldErr(queen.ErrInvalidField.With("limit must be a whole number from 1 to %d, got %d", queen.MaxPeekLimit, *in.Limit), "limit")
		}
		p.Limit = *in.Limit
	}
	return p, checkPeek(p)
}

func checkPeek(p queen.PeekQuery) error {
	if p.Queue == "" {
		return fieldErr(queen.ErrMissingField.With("queue is required"), "queue")
	}
	if err := queen.ValidateName(p.Queue, "queue"); err != nil {
		return err
	}
	return queen.ValidateName(p.Partition, "partition")
}
