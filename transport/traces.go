package transport

import (
	"encoding/json"
	"net/http"

	"github.com/google/uuid"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/transport/wire"
)

// traceReply answers POST /api/v1/traces.
type traceReply struct {
	Accepted bool   `json:"accepted"`
	Recorded bool   `json:"recorded"`
	Reason   string `json:"reason"`
}

// traceDiscarded says why a trace event is not kept.
const traceDiscarded = "this broker does not keep message traces: the event was validated and discarded (no GET /api/v1/traces routes)"

// trace answers POST /api/v1/traces, the upstream SDKs' Message.Trace call:
// {"transactionId","partitionId","consumerGroup"?,"traceNames"?:string|[string],
// "eventType"?,"data":{...}}. Upstream Queen stores the event against the
// message's row and serves it back on GET /api/v1/traces/...; this broker
// keeps no message rows (messages are frames of segments) and serves no trace
// reads, so it validates the body as upstream does (400 missing_field without
// transactionId, partitionId or data; 400 invalid_field for a partitionId
// that is not a UUID) and answers 202 {"accepted":true,"recorded":false,
// "reason":"..."} without writing anything. The SDKs count any 2xx as
// success and never fail a handler on a trace.
func (s *Service) trace(body []byte) reply {
	var in struct {
		TransactionID *string         `json:"transactionId"`
		PartitionID   *string         `json:"partitionId"`
		Data          json.RawMessage `json:"data"`
	}
	if err := wire.DecodeObject(body, &in); err != nil {
		return errReply(err)
	}
	for _, f := range []struct {
		name string
		ok   bool
	}{{"transactionId", in.TransactionID != nil}, {"partitionId", in.PartitionID != nil}, {"data", len(in.Data) > 0}} {
		if !f.ok {
			e := queen.ErrMissingField.With("%s is required", f.name)
			e.Field = f.name
			return errReply(e)
		}
	}
	if _, err := uuid.Parse(*in.PartitionID); err != nil {
		e := queen.ErrInvalidField.With("partitionId must be a UUID, got %q", *in.PartitionID)
		e.Field = "partitionId"
		return errReply(e)
	}
	s.cfg.Metrics.TracesDiscarded.Inc()
	return reply{status: http.StatusAccepted, body: traceReply{Accepted: true, Reason: traceDiscarded}}
}
