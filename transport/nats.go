package transport

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	queen "github.com/queen-mq/queen-go"
)

// The client subjects of SPEC.md §11.
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
	// ServiceName is the NATS micro service name (nats micro ls/info/stats).
	ServiceName = "queen"
	// QueueGroup is the queue group every broker serves the client subjects in.
	QueueGroup = "queen"
)

// NATSService is the running micro service.
type NATSService struct {
	nc     *nats.Conn
	svc    micro.Service
	sem    chan struct{}
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
	// received counts requests dispatched to the endpoints (Stop waits
	// until it stops moving).
	received atomic.Int64
}

// maxConcurrentRequests bounds the requests one broker handles at once over
// NATS; beyond it the subscription stops reading and NATS buffers.
const maxConcurrentRequests = 4096

// ServeNATS registers the micro service "queen" on nc with the endpoints
// queen.v1.push, queen.v1.configure, queen.v1.queue, queen.v1.pop (a JSON
// body with the HTTP pop's query fields; an empty reply when nothing is
// available), queen.v1.ack, queen.v1.ack.batch, queen.v1.lease.extend
// ({"leaseId","seconds"}), queen.v1.transaction and queen.v1.cluster (the
// cluster view of GET /api/v1/cluster), in queue group
// "queen". Request and reply bodies are the HTTP ones; errors carry the micro
// error headers (Nats-Service-Error-Code = the HTTP status) and the JSON error
// body (SPEC.md §11).
func (s *Service) ServeNATS(nc *nats.Conn, version string) (*NATSService, error) {
	svc, err := micro.AddService(nc, micro.Config{
		Name:        ServiceName,
		Version:     version,
		Description: "Queen partitioned message queue on PostgreSQL with idempotent producers",
		QueueGroup:  QueueGroup,
	})
	if err != nil {
		return nil, err
	}
	ns := &NATSService{nc: nc, svc: svc, sem: make(chan struct{}, maxConcurrentRequests)}
	// Handlers answer on their own goroutine, so one slow push does not hold
	// up the endpoint. The reply is published directly: a micro.Request must
	// not be touched after its handler returned.
	async := func(h func(ctx context.Context, data []byte, r micro.Request) reply) micro.HandlerFunc {
		return func(r micro.Request) {
			subject, data := r.Reply(), r.Data()
			ns.received.Add(1)
			ns.mu.Lock()
			if ns.closed {
				ns.mu.Unlock()
				ns.publish(subject, errReply(queen.ErrShuttingDown))
				return
			}
			ns.wg.Add(1)
			ns.mu.Unlock()
			ns.sem <- struct{}{}
			go func() {
				defer func() { <-ns.sem; ns.wg.Done() }()
				ns.publish(subject, h(context.Background(), data, r))
			}()
		}
	}
	eps := []struct {
		name, subject string
		h             func(ctx context.Context, data []byte, r micro.Request) reply
	}{
		{"push", SubjectPush, func(ctx context.Context, b []byte, _ micro.Request) reply { return s.push(ctx, b, "nats") }},
		{"configure", SubjectConfigure, func(ctx context.Context, b []byte, _ micro.Request) reply { return s.configure(ctx, b) }},
		{"queue", SubjectQueue, func(ctx context.Context, b []byte, _ micro.Request) reply { return s.queue(ctx, string(b)) }},
		{"pop", SubjectPop, func(ctx context.Context, b []byte, _ micro.Request) reply {
			req, err := queen.DecodePop(b)
			return s.pop(ctx, req, err)
		}},
		{"ack", SubjectAck, func(ctx context.Context, b []byte, _ micro.Request) reply { return s.ack(ctx, b) }},
		{"ack_batch", SubjectAckBatch, func(ctx context.Context, b []byte, _ micro.Request) reply { return s.ackBatch(ctx, b) }},
		{"lease_extend", SubjectLeaseExtend, func(ctx context.Context, b []byte, _ micro.Request) reply { return s.extendLeaseNATS(ctx, b) }},
		{"transaction", SubjectTransaction, func(ctx context.Context, b []byte, _ micro.Request) reply { return s.transaction(ctx, b) }},
		{"cluster", SubjectCluster, func(ctx context.Context, _ []byte, _ micro.Request) reply { return s.cluster(ctx) }},
	}
	for _, ep := range eps {
		if err := svc.AddEndpoint(ep.name, async(ep.h), micro.WithEndpointSubject(ep.subject)); err != nil {
			svc.Stop() //nolint:errcheck
			return nil, err
		}
	}
	// The endpoints exist on the server once Flush returns: a client pushing
	// the moment the broker reports ready finds a responder.
	if err := nc.Flush(); err != nil {
		svc.Stop() //nolint:errcheck
		return nil, err
	}
	return ns, nil
}

// Stop stops taking requests and waits for those in flight to be answered.
// The endpoints are drained first, so the queue group sends new requests to
// the other brokers while the ones already delivered here are still served
// normally; only a request that arrives once the drain has settled (none
// for quiet) is answered 503 shutting_down.
func (ns *NATSService) Stop() error {
	err := ns.svc.Stop() // unsubscribes; messages already here are still dispatched
	ns.nc.Flush()        //nolint:errcheck // the server has seen the unsubscribes
	const quiet, most = 100 * time.Millisecond, 2 * time.Second
	for deadline := time.Now().Add(most); time.Now().Before(deadline); {
		before := ns.received.Load()
		time.Sleep(quiet)
		if ns.received.Load() == before {
			break
		}
	}
	ns.mu.Lock()
	ns.closed = true
	ns.mu.Unlock()
	ns.wg.Wait()
	return err
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
		text := http.StatusText(rep.status)
		if e, ok := rep.body.(interface{ Error() string }); ok {
			text = e.Error()
		}
		msg.Header.Set(micro.ErrorHeader, text)
		msg.Header.Set(micro.ErrorCodeHeader, strconv.Itoa(rep.status))
	}
	ns.nc.PublishMsg(msg) //nolint:errcheck // the requester went away
}
