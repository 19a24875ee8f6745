package transport

import (
	"context"
	"net/http"
	"strconv"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// The client subjects of SPEC.md §11.
const (
	SubjectPush      = "queen.v1.push"
	SubjectConfigure = "queen.v1.configure"
	SubjectQueue     = "queen.v1.queue"
	// ServiceName is the NATS micro service name (nats micro ls/info/stats).
	ServiceName = "queen"
	// QueueGroup is the queue group every broker serves the client subjects in.
	QueueGroup = "queen"
)

// NATSService is the running micro service.
type NATSService struct {
	svc micro.Service
	sem chan struct{}
	wg  sync.WaitGroup
}

// maxConcurrentRequests bounds the requests one broker handles at once over
// NATS; beyond it the subscription stops reading and NATS buffers.
const maxConcurrentRequests = 4096

// ServeNATS registers the micro service "queen" on nc with the endpoints
// queen.v1.push, queen.v1.configure and queen.v1.queue, in queue group
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
	ns := &NATSService{svc: svc, sem: make(chan struct{}, maxConcurrentRequests)}
	async := func(h func(ctx context.Context, data []byte, r micro.Request) reply) micro.HandlerFunc {
		return func(r micro.Request) {
			ns.sem <- struct{}{}
			ns.wg.Add(1)
			go func() {
				defer func() { <-ns.sem; ns.wg.Done() }()
				respond(r, h(context.Background(), r.Data(), r))
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
	}
	for _, ep := range eps {
		if err := svc.AddEndpoint(ep.name, async(ep.h), micro.WithEndpointSubject(ep.subject)); err != nil {
			svc.Stop() //nolint:errcheck
			return nil, err
		}
	}
	return ns, nil
}

// Stop drains the endpoints and waits for requests in flight to be answered.
func (ns *NATSService) Stop() error {
	err := ns.svc.Stop()
	ns.wg.Wait()
	return err
}

func respond(r micro.Request, rep reply) {
	body := mustJSON(rep.body)
	if rep.status >= 400 {
		msg := http.StatusText(rep.status)
		if e, ok := rep.body.(interface{ Error() string }); ok {
			msg = e.Error()
		}
		r.Error(strconv.Itoa(rep.status), msg, body) //nolint:errcheck
		return
	}
	r.Respond(body) //nolint:errcheck
}
