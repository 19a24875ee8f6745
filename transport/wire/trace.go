package wire

import (
	"encoding/json"

	"github.com/google/uuid"

	queen "github.com/queen-mq/queen-go"
)

// TraceDiscarded is TraceReply's Reason: why a trace event is not kept.
const TraceDiscarded = "this broker does not keep message traces: the event was validated and discarded (no GET /api/v1/traces routes)"

// TraceReply answers POST /api/v1/traces (202): Accepted, never Recorded,
// and the Reason (TraceDiscarded).
type TraceReply struct {
	Accepted bool   `json:"accepted"`
	Recorded bool   `json:"recorded"`
	Reason   string `json:"reason"`
}

// DecodeTrace validates a body of POST /api/v1/traces, the upstream SDKs'
// Message.Trace call {"transactionId","partitionId","consumerGroup"?,
// "traceNames"?:string|[string],"eventType"?,"data":{...}}, as upstream
// Queen does, with DecodeObject's checks: 400 missing_field without
// transactionId, partitionId or data (in that order), 400 invalid_field for
// a partitionId that is not a UUID. Nothing of it is kept, so nothing is
// returned.
func DecodeTrace(body []byte) error {
	var in struct {
		TransactionID *string         `json:"transactionId"`
		PartitionID   *string         `json:"partitionId"`
		Data          json.RawMessage `json:"data"`
	}
	if err := DecodeObject(body, &in); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		ok   bool
	}{{"transactionId", in.TransactionID != nil}, {"partitionId", in.PartitionID != nil}, {"data", len(in.Data) > 0}} {
		if !f.ok {
			return fieldErr(queen.ErrMissingField.With("%s is required", f.name), f.name)
		}
	}
	if _, err := uuid.Parse(*in.PartitionID); err != nil {
		return fieldErr(queen.ErrInvalidField.With("partitionId must be a UUID, got %q", *in.PartitionID), "partitionId")
	}
	return nil
}
