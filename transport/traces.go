package transport

import (
	"net/http"

	"github.com/queen-mq/queen-go/transport/wire"
)

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
	if err := wire.DecodeTrace(body); err != nil {
		return errReply(err)
	}
	s.cfg.Metrics.TracesDiscarded.Inc()
	return reply{status: http.StatusAccepted, body: wire.TraceReply{Accepted: true, Reason: wire.TraceDiscarded}}
}
