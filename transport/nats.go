package transport

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/lifecycle"
	"github.com/queen-mq/queen-go/transport/auth"
	"github.com/queen-mq/queen-go/transport/wire"
)

// The NATS micro service's names (the subjects are wire.Subject*).
const (
	// ServiceName is the NATS micro service name (nats micro ls/info/stats).
	ServiceName = "queen"
	// QueueGroup is the queue group every broker serves the client subjects in.
	QueueGroup = "queen"
)

// NATSService is the running micro service.
//
// It speaks the NATS micro protocol itself ($SRV.PING, $SRV.INFO and
// $SRV.STATS for all services, for "queen" and for its instance id, with the
// micro package's reply types) instead of running a micro.Service: handlers
// answer on their own goroutines, after the micro.Service's handler would
// have returned, and that service counts an error only when its handler
// answers through the request before returning. Here every reply, success or
// error, is counted when it is published, so `nats micro stats queen` shows
// the requests answered, the error replies (Nats-Service-Error-Code set) and
// the time from receipt to reply.
type NATSService struct {
	nc       *nats.Conn
	id       string
	version  string
	started  time.Time
	eps      []*natsEndpoint
	verbSubs []*nats.Subscription
	sem      chan struct{}
	mu       sync.Mutex
	// subscribed: between Start and Stop; closed: requests still
	// dispatched are answered shutting_down.
	subscribed bool
	closed     bool
	wg         sync.WaitGroup
	// received counts requests dispatched to the endpoints (Stop waits
	// until it stops moving).
	received atomic.Int64
	// push is the queen.v1.push endpoint's handler (ShardPush).
	push nats.MsgHandler
}

// ShardPush answers a client's push that arrived on a shard subject
// (queen.v1.shard.<n>.push with the header Content-Type: application/json,
// sent by a shard-aware Client) exactly as queen.v1.push answers it: the
// same body, validation, errors (SPEC.md §10, §11) and replies, counted in
// the push endpoint's stats. The broker gives it to shards.Server.SetDirect;
// its router then serves the items here, since this broker owns the shard.
func (ns *NATSService) ShardPush(m *nats.Msg) { ns.push(m) }

// natsEndpoint is one endpoint with its micro stats.
type natsEndpoint struct {
	name, subject string
	h             nats.MsgHandler // set by NewNATS
	sub           *nats.Subscription
	mu            sync.Mutex
	requests      int
	errors        int
	lastError     string
	processing    time.Duration
}

// record counts one answered request.
func (ep *natsEndpoint) record(rep reply, took time.Duration) {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	ep.requests++
	ep.processing += took
	if rep.status >= 400 {
		ep.errors++
		ep.lastError = strconv.Itoa(rep.status) + ":" + errorText(rep)
	}
}

func (ep *natsEndpoint) stats() *micro.EndpointStats {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	st := &micro.EndpointStats{Name: ep.name, Subject: ep.subject, QueueGroup: QueueGroup, NumRequests: ep.requests,
		NumErrors: ep.errors, LastError: ep.lastError, ProcessingTime: ep.processing}
	if ep.requests > 0 {
		st.AverageProcessingTime = ep.processing / time.Duration(ep.requests)
	}
	return st
}

// maxConcurrentRequests bounds the requests one broker handles at once over
// NATS; beyond it the subscription stops reading and NATS buffers.
const maxConcurrentRequests = 4096

// serviceDescription is the micro service's description.
const serviceDescription = "Queen partitioned message queue on PostgreSQL with idempotent producers"

// NewNATS returns the micro service "queen" on cfg.Conn with the endpoints
// queen.v1.push, queen.v1.configure, queen.v1.queue, queen.v1.pop (a JSON
// body with the HTTP pop's query fields; an empty reply when nothing is
// available), queen.v1.ack, queen.v1.ack.batch, queen.v1.lease.extend
// ({"leaseId","seconds"}), queen.v1.transaction, queen.v1.cluster (the
// cluster view of GET /api/v1/cluster), queen.v1.dedup (the dedup
// inspector, SPEC.md §13), queen.v1.dlq.replay (DLQ replay), queen.v1.peek
// (a read-only peek at stored messages) and queen.v1.queue.detail (a
// queue's partitions and group cursors), in queue group
// "queen". Request and reply bodies are the HTTP ones; errors carry the micro
// error headers (Nats-Service-Error-Code = the HTTP status) and the JSON error
// body (SPEC.md §11). The micro monitoring subjects ($SRV.PING|INFO|STATS,
// .queen, .queen.<id>) answer for it; the stats count every reply, errors
// included (NATSService). Start subscribes them; nothing is subscribed
// before. It refuses (a *lifecycle.SettingError) a missing Conn and a Version
// that is not SemVer (nats micro wants one).
// With Config.AdminToken set, the admin subjects (queen.v1.queue,
// queen.v1.cluster, queen.v1.dedup, queen.v1.dlq.replay, queen.v1.peek,
// queen.v1.queue.detail, queen.v1.auth.whoami) answer 401
// unauthorized unless the request carries the message header
// "Authorization: Bearer <token>"; so does a queen.v1.configure of an
// existing queue that deletes data (Service.configure).
//
// With JWT on (Config.JWT, SPEC.md §14) every subject needs the message
// header "Authorization: Bearer <JWT>" (wire.HeaderAuthorization) reaching
// its level, as the HTTP routes do: read-only for queen.v1.queue,
// queen.v1.cluster, queen.v1.peek, queen.v1.queue.detail and
// queen.v1.auth.whoami; read-write for
// push (a shard-aware client's push on a shard subject too), configure,
// pop, ack, ack.batch, lease.extend and transaction; admin for
// queen.v1.dedup and queen.v1.dlq.replay, and for a configure that deletes
// data. A refusal is the HTTP one (401 unauthorized saying why, 403
// forbidden) in the micro error headers and the JSON error body, answered
// before the body is decoded.
func (s *Service) NewNATS(cfg NATSConfig) (*NATSService, error) {
	var bad error
	if !semVer.MatchString(cfg.Version) {
		bad = &lifecycle.SettingError{Setting: "NATSConfig.Version", Value: strconv.Quote(cfg.Version), Want: "SemVer, such as 1.2.3"}
	}
	if err := errors.Join(lifecycle.Required("NATSConfig.Conn", cfg.Conn == nil), bad); err != nil {
		return nil, fmt.Errorf("transport: %w", err)
	}
	ns := &NATSService{nc: cfg.Conn, id: strings.ReplaceAll(uuid.NewString(), "-", ""), version: cfg.Version,
		started: time.Now().UTC(), sem: make(chan struct{}, maxConcurrentRequests)}
	// Handlers answer on their own goroutine, so one slow push does not hold
	// up the endpoint's subscription.
	async := func(ep *natsEndpoint, h func(ctx context.Context, data []byte) reply, admin bool, level auth.Level) nats.MsgHandler {
		return func(m *nats.Msg) {
			start := time.Now()
			subject, data := m.Reply, m.Data
			ns.received.Add(1)
			if s.cfg.JWT == nil && admin && !s.authorized(m.Header.Get("Authorization")) {
				ns.answer(ep, subject, unauthorized(), start)
				return
			}
			ns.mu.Lock()
			if ns.closed {
				ns.mu.Unlock()
				ns.answer(ep, subject, errReply(queen.ErrShuttingDown), start)
				return
			}
			ns.wg.Add(1)
			ns.mu.Unlock()
			ns.sem <- struct{}{}
			go (func() {
				defer func() { <-ns.sem; ns.wg.Done() }()
				ctx := context.Background()
				authz := m.Header.Get(wire.HeaderAuthorization)
				if authz != "" {
					ctx = queen.WithAuthorization(ctx, authz)
				}
				// The JWT check runs here, off the subscription's
				// goroutine: an RS256 verification (or a JWK Set fetch for
				// an unknown key id) holds up no other request.
				ctx, refused := s.checkNATS(ctx, authz, level, ep.subject)
				if refused != nil {
					ns.answer(ep, subject, *refused, start)
					return
				}
				ctx = context.WithValue(ctx, clientKey{}, natsClient(m.Reply))
				ns.answer(ep, subject, h(ctx, data), start)
			})()
		}
	}
	eps := []struct {
		name, subject string
		h             func(ctx context.Context, data []byte) reply
		admin         bool       // guarded by Config.AdminToken (JWT off)
		level         auth.Level // needed with JWT on (Config.JWT)
	}{
		{"push", wire.SubjectPush, func(ctx context.Context, b []byte) reply { return s.push(ctx, b, "nats") }, false, auth.ReadWrite},
		{"configure", wire.SubjectConfigure, func(ctx context.Context, b []byte) reply {
			authz := queen.AuthorizationFrom(ctx)
			return s.configure(ctx, b, s.mayDeleteData(ctx, authz))
		}, false, auth.ReadWrite},
		{"queue", wire.SubjectQueue, func(ctx context.Context, b []byte) reply { return s.queue(ctx, string(b)) }, true, auth.ReadOnly},
		{"pop", wire.SubjectPop, func(ctx context.Context, b []byte) reply {
			req, err := wire.DecodePop(b)
			return s.pop(ctx, req, err)
		}, false, auth.ReadWrite},
		{"ack", wire.SubjectAck, func(ctx context.Context, b []byte) reply { return s.ack(ctx, b) }, false, auth.ReadWrite},
		{"ack_batch", wire.SubjectAckBatch, func(ctx context.Context, b []byte) reply { return s.ackBatch(ctx, b) }, false, auth.ReadWrite},
		{"lease_extend", wire.SubjectLeaseExtend, func(ctx context.Context, b []byte) reply { return s.extendLeaseNATS(ctx, b) }, false, auth.ReadWrite},
		{"transaction", wire.SubjectTransaction, func(ctx context.Context, b []byte) reply { return s.transaction(ctx, b) }, false, auth.ReadWrite},
		{"cluster", wire.SubjectCluster, func(ctx context.Context, _ []byte) reply { return s.cluster(ctx) }, true, auth.ReadOnly},
		{"dedup", wire.SubjectDedup, func(ctx context.Context, b []byte) reply {
			q, err := wire.DecodeDedup(b)
			return s.dedup(ctx, q, err)
		}, true, auth.Admin},
		{"dlq_replay", wire.SubjectDLQReplay, func(ctx context.Context, b []byte) reply { return s.replay(ctx, b) }, true, auth.Admin},
		{"peek", wire.SubjectPeek, func(ctx context.Context, b []byte) reply {
			q, err := wire.DecodePeek(b)
			return s.peek(ctx, q, err)
		}, true, auth.ReadOnly},
		{"queue_detail", wire.SubjectQueueDetail, func(ctx context.Context, b []byte) reply { return s.queueDetailNATS(ctx, b) }, true, auth.ReadOnly},
		{"whoami", wire.SubjectWhoami, func(ctx context.Context, _ []byte) reply {
			authz := queen.AuthorizationFrom(ctx)
			return s.whoamiOf(ctx, authz)
		}, true, auth.ReadOnly},
	}
	for _, e := range eps {
		ep := &natsEndpoint{name: e.name, subject: e.subject}
		ep.h = async(ep, e.h, e.admin, e.level)
		if e.subject == wire.SubjectPush {
			ns.push = ep.h
		}
		ns.eps = append(ns.eps, ep)
	}
	return ns, nil
}

// clientKey carries a request's client (pollClient) in its context.
type clientKey struct{}

// natsClient is the client of a NATS request, for the per-client cap on
// parked long polls: its reply subject up to the last token (nats.go's
// request muxer gives each connection one inbox prefix,
// "_INBOX.<nuid>.<token>"), or the whole subject.
func natsClient(reply string) string {
	if i := strings.LastIndexByte(reply, '.'); i > 0 {
		return "nats:" + reply[:i]
	}
	return "nats:" + reply
}

// NATSConfig configures the NATS front door (Service.NewNATS).
type NATSConfig struct {
	// Conn carries the client subjects (required).
	Conn *nats.Conn
	// Version is reported by the micro service (nats micro info); it must be
	// SemVer (required).
	Version string
}

// semVer is what nats micro accepts as a service version.
var semVer = regexp.MustCompile(`^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$`)

// Start subscribes the endpoints and the micro monitoring subjects; it
// returns once the server has them, so a client pushing the moment the
// broker reports ready finds a responder. On error nothing stays
// subscribed. A second Start does nothing.
func (ns *NATSService) Start(context.Context) error {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	if ns.subscribed {
		return nil
	}
	nc := ns.nc
	for _, ep := range ns.eps {
		sub, err := nc.QueueSubscribe(ep.subject, QueueGroup, ep.h)
		if err != nil {
			ns.unsubscribe()
			return err
		}
		ep.sub = sub
	}
	for verb, value := range map[micro.Verb]func() any{
		micro.PingVerb:  func() any { return micro.Ping{ServiceIdentity: ns.identity(), Type: micro.PingResponseType} },
		micro.InfoVerb:  func() any { return ns.info() },
		micro.StatsVerb: func() any { return ns.Stats() },
	} {
		for _, name := range [][2]string{{"", ""}, {ServiceName, ""}, {ServiceName, ns.id}} {
			subject, err := micro.ControlSubject(verb, name[0], name[1])
			if err == nil {
				var sub *nats.Subscription
				sub, err = nc.Subscribe(subject, func(m *nats.Msg) {
					b, _ := json.Marshal(value())
					m.Respond(b) //nolint:errcheck // the requester went away
				})
				if err == nil {
					ns.verbSubs = append(ns.verbSubs, sub)
				}
			}
			if err != nil {
				ns.unsubscribe()
				return err
			}
		}
	}
	// The endpoints exist on the server once Flush returns.
	if err := nc.Flush(); err != nil {
		ns.unsubscribe()
		return err
	}
	ns.subscribed = true
	return nil
}

func (ns *NATSService) identity() micro.ServiceIdentity {
	return micro.ServiceIdentity{Name: ServiceName, ID: ns.id, Version: ns.version, Metadata: map[string]string{}}
}

func (ns *NATSService) info() micro.Info {
	in := micro.Info{ServiceIdentity: ns.identity(), Type: micro.InfoResponseType, Description: serviceDescription,
		Endpoints: make([]micro.EndpointInfo, 0, len(ns.eps))}
	for _, ep := range ns.eps {
		in.Endpoints = append(in.Endpoints, micro.EndpointInfo{Name: ep.name, Subject: ep.subject, QueueGroup: QueueGroup})
	}
	return in
}

// Stats is what $SRV.STATS.queen answers: per endpoint, the requests
// answered, the error replies (status >= 400) with the last one as
// "<status>:<sentence>", and the time from receipt to reply.
func (ns *NATSService) Stats() micro.Stats {
	st := micro.Stats{ServiceIdentity: ns.identity(), Type: micro.StatsResponseType, Started: ns.started,
		Endpoints: make([]*micro.EndpointStats, 0, len(ns.eps))}
	for _, ep := range ns.eps {
		st.Endpoints = append(st.Endpoints, ep.stats())
	}
	return st
}

// answer counts rep in ep's stats, then publishes it (so a client that has
// its reply finds it counted).
func (ns *NATSService) answer(ep *natsEndpoint, subject string, rep reply, start time.Time) {
	ep.record(rep, time.Since(start))
	ns.publish(subject, rep)
}

// unsubscribe drops every subscription (a failed start).
func (ns *NATSService) unsubscribe() {
	for _, ep := range ns.eps {
		if ep.sub != nil {
			ep.sub.Unsubscribe() //nolint:errcheck
			ep.sub = nil
		}
	}
	for _, sub := range ns.verbSubs {
		sub.Unsubscribe() //nolint:errcheck
	}
	ns.verbSubs = nil
}

// Stop stops taking requests and waits for those in flight to be answered,
// or ctx to end (ctx.Err()). The endpoints are drained first, so the queue
// group sends new requests to the other brokers while the ones already
// delivered here are still served normally; only a request that arrives
// once the drain has settled (none for quiet) is answered 503
// shutting_down. A second Stop, and a Stop before Start, do nothing.
func (ns *NATSService) Stop(ctx context.Context) error {
	ns.mu.Lock()
	if !ns.subscribed {
		ns.closed = true
		ns.mu.Unlock()
		return nil
	}
	ns.subscribed = false
	ns.mu.Unlock()
	var err error
	for _, ep := range ns.eps { // unsubscribes; messages already here are still dispatched
		if e := ep.sub.Drain(); e != nil && err == nil && !errors.Is(e, nats.ErrConnectionClosed) {
			err = e
		}
	}
	for _, sub := range ns.verbSubs {
		sub.Unsubscribe() //nolint:errcheck
	}
	ns.nc.Flush() //nolint:errcheck // the server has seen the unsubscribes
	const quiet, most = 100 * time.Millisecond, 2 * time.Second
	for deadline := time.Now().Add(most); time.Now().Before(deadline) && ctx.Err() == nil; {
		before := ns.received.Load()
		time.Sleep(quiet)
		if ns.received.Load() == before {
			break
		}
	}
	ns.mu.Lock()
	ns.closed = true
	ns.mu.Unlock()
	done := make(chan struct{})
	go func() { ns.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		err = errors.Join(err, ctx.Err())
	}
	return err
}

// errorText is an error reply's sentence.
func errorText(rep reply) string {
	if e, ok := rep.body.(interface{ Error() string }); ok {
		return e.Error()
	}
	return http.StatusText(rep.status)
}

// publish sends a reply; errors carry the micro error headers
// (Nats-Service-Error-Code = the HTTP status) and the JSON error body.
func (ns *NATSService) publish(subject string, rep reply) {
	if subject == "" {
		return
	}
	msg := nats.NewMsg(subject)
	msg.Data = mustJSON(rep.body)
	if rep.status >= 400 {
		msg.Header.Set(micro.ErrorHeader, errorText(rep))
		msg.Header.Set(micro.ErrorCodeHeader, strconv.Itoa(rep.status))
	}
	ns.nc.PublishMsg(msg) //nolint:errcheck // the requester went away
}
