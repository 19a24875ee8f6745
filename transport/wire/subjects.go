package wire

import "strconv"

// The client subjects of SPEC.md §11, served by every broker in queue group
// QueueGroup (package transport) and called by the Go client (package
// transport/client). Request and reply bodies are the HTTP ones; an error
// reply carries the header Nats-Service-Error-Code (the HTTP status) and the
// JSON error body (SPEC.md §10).
const (
	SubjectPush        = "queen.v1.push"
	SubjectConfigure   = "queen.v1.configure"
	SubjectQueue       = "queen.v1.queue"
	SubjectPop         = "queen.v1.pop"
	SubjectAck         = "queen.v1.ack"
	SubjectAckBatch    = "queen.v1.ack.batch"
	SubjectLeaseExtend = "queen.v1.lease.extend"
	SubjectTransaction = "queen.v1.transaction"
	// SubjectCluster answers the cluster view of GET /api/v1/cluster (any body).
	SubjectCluster = "queen.v1.cluster"
	// SubjectDedup is the dedup inspector of GET /api/v1/dedup (SPEC.md
	// §13), with {"queue","partition","transactionId"} as the body.
	SubjectDedup = "queen.v1.dedup"
	// SubjectDLQReplay is DLQ replay, POST /api/v1/dlq/replay (SPEC.md §13).
	SubjectDLQReplay = "queen.v1.dlq.replay"
	// SubjectPeek is the read-only peek of GET
	// /api/v1/queues/{queue}/messages, with
	// {"queue","partition","after","limit"} as the body.
	SubjectPeek = "queen.v1.peek"
	// SubjectQueueDetail is GET /api/v1/queues/{queue}, with {"queue"} as
	// the body.
	SubjectQueueDetail = "queen.v1.queue.detail"
	// SubjectWhoami is GET /api/v1/auth/whoami (WhoamiReply; any body):
	// who the broker takes the request's Authorization header for.
	SubjectWhoami = "queen.v1.auth.whoami"
)

// The headers both sides of the NATS API read (SPEC.md §11, §13).
const (
	// HeaderErrorCode carries an error reply's HTTP status.
	HeaderErrorCode = "Nats-Service-Error-Code"
	// HeaderError carries an error reply's status sentence.
	HeaderError = "Nats-Service-Error"
	// HeaderAuthorization carries "Bearer <QUEEN_ADMIN_TOKEN>" on an admin
	// subject, or with JWT on (SPEC.md §14) "Bearer <JWT>" on every client
	// subject.
	HeaderAuthorization = "Authorization"
	// HeaderContentType set to ContentTypeJSON marks a client's push on a
	// shard subject (ShardPushSubject).
	HeaderContentType = "Content-Type"
	// HeaderDeadline carries, on a shard subject (ShardPushSubject), the
	// moment after which the sender no longer waits for the answer: Unix
	// time in nanoseconds, decimal. A broker's router sets it from its hop's
	// deadline; the shard server does not execute a request that arrives
	// after it (one a NATS client kept in its reconnect buffer through an
	// outage) and answers its items failed with code timeout instead
	// (SPEC.md §9). Absent: no deadline. A value that is not a decimal
	// int64 is refused 400 invalid_field.
	HeaderDeadline = "Queen-Deadline"
	// HeaderProducerSub carries, on a shard subject's internal hop
	// (ShardPushSubject), the producer identity of the hop's items (SPEC.md
	// §14, queen.Item.ProducerSub: the pushing token's "sub" with JWT on),
	// so the shard's owner stamps the same producerSub as the broker the
	// client pushed to. Absent: no identity (JWT off). One hop carries the
	// items of one producer.
	HeaderProducerSub = "Queen-Producer-Sub"
	// ContentTypeJSON is the Content-Type of a request body in JSON; on a
	// shard subject it marks the public push body (SPEC.md §3, §11), not
	// the internal encoding brokers send each other.
	ContentTypeJSON = "application/json"
)

// ShardSubjectPrefix is the prefix of the shard subjects
// queen.v1.shard.<n>.* (SPEC.md §9).
const ShardSubjectPrefix = "queen.v1.shard"

// ShardPushSubject is the subject of shard n's pushes,
// queen.v1.shard.<n>.push (SPEC.md §9), served only by the broker that owns
// shard n (no responder: no broker serves it at the moment). Brokers send
// each other a shard's items on it in their internal encoding; a
// shard-aware client sends the body of queen.v1.push with the header
// Content-Type: application/json (ContentTypeJSON) and gets the answer
// queen.v1.push gives (SPEC.md §11).
func ShardPushSubject(n int) string {
	return ShardSubjectPrefix + "." + strconv.Itoa(n) + ".push"
}
