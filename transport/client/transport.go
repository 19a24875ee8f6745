package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/nats-io/nats.go"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/transport/wire"
)

// Transport carries one request to a broker and returns its answer: over
// NATS (NATS) or over the HTTP gateway (HTTP). Both answer a request the
// same way (SPEC.md §11): the body and status the broker sent. It is safe
// for concurrent use.
type Transport interface {
	// RoundTrip sends r and returns the broker's answer, whatever its
	// status (a refusal is a Reply too; Client decodes it). An error means
	// no answer: a *NoAnswerError.
	RoundTrip(ctx context.Context, r *Request) (Reply, error)
}

// Request is one request in both of its forms: the NATS subject and the
// HTTP route of the same operation (SPEC.md §11: the bodies are the same
// unless NATSBody says otherwise).
type Request struct {
	// Subject is the NATS subject; empty when the operation is served only
	// by the HTTP gateway (over NATS the request is then refused,
	// queen.ErrNotFound, without being sent).
	Subject string
	// Method and Path are the HTTP route, Path with its query string.
	Method, Path string
	// Body is the request body (nil: none); NATSBody, when not nil, the
	// NATS body where it differs (the HTTP form carries fields in the path
	// or the query).
	Body, NATSBody []byte
	// Token, when not empty, is sent as "Authorization: Bearer <token>"
	// (an admin route under QUEEN_ADMIN_TOKEN, SPEC.md §13; any route of a
	// broker with JWT on, SPEC.md §14).
	Token string
	// ContentType, when not empty, is sent as the NATS Content-Type header
	// (wire.ContentTypeJSON marks a client's push on a shard subject);
	// over HTTP a body is always sent as application/json.
	ContentType string
}

// Reply is a broker's answer.
type Reply struct {
	// Status is the HTTP status; over NATS 200 for a reply without error
	// headers, else the Nats-Service-Error-Code header (500 if unreadable).
	Status int
	// Text is the status's sentence: the HTTP status text, or the NATS
	// Nats-Service-Error header.
	Text string
	// Body is the reply body as the broker sent it.
	Body []byte
}

// OK reports a 2xx answer.
func (r Reply) OK() bool { return r.Status >= 200 && r.Status < 300 }

// Err is nil for a 2xx answer, else the broker's refusal as a *queen.Error
// (wire.DecodeError: the registry error of the body, Status set): the one
// error decoding of the client.
func (r Reply) Err() error {
	if r.OK() {
		return nil
	}
	return wire.DecodeError(r.Status, r.Body)
}

// NoAnswerError is the error of a request no broker answered: no responder
// on a NATS subject or an HTTP connection that failed (Err is
// queen.ErrUnavailable), or no answer before the context ended (Err is
// queen.ErrTimeout). The outcome of such a request is unknown; both codes
// are retryable, and sending the same items again is exact (SPEC.md §3).
type NoAnswerError struct{ Err *queen.Error }

func (e *NoAnswerError) Error() string { return e.Err.Error() }

// Unwrap gives Err, so errors.Is(err, queen.ErrUnavailable) and
// queen.AsError work.
func (e *NoAnswerError) Unwrap() error { return e.Err }

func noAnswer(e *queen.Error) error { return &NoAnswerError{Err: e} }

// natsTransport is Transport over a NATS connection.
type natsTransport struct{ nc *nats.Conn }

// NATS is the Transport over nc (the client subjects of SPEC.md §11, in
// the brokers' queue group). The connection stays the caller's to close.
func NATS(nc *nats.Conn) Transport { return natsTransport{nc: nc} }

func (t natsTransport) RoundTrip(ctx context.Context, r *Request) (Reply, error) {
	if r.Subject == "" {
		return Reply{}, queen.ErrNotFound.With("%s %s has no NATS subject: use the HTTP gateway", r.Method, r.Path)
	}
	m := &nats.Msg{Subject: r.Subject, Data: r.Body}
	if r.NATSBody != nil {
		m.Data = r.NATSBody
	}
	if r.Token != "" || r.ContentType != "" {
		m.Header = nats.Header{}
		if r.Token != "" {
			m.Header.Set(wire.HeaderAuthorization, "Bearer "+r.Token)
		}
		if r.ContentType != "" {
			m.Header.Set(wire.HeaderContentType, r.ContentType)
		}
	}
	msg, err := t.nc.RequestMsgWithContext(ctx, m)
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			return Reply{}, noAnswer(queen.ErrUnavailable.With("no broker answers on %s", r.Subject))
		}
		return Reply{}, noAnswer(queen.ErrTimeout.With("request on %s: %v", r.Subject, err))
	}
	if code := msg.Header.Get(wire.HeaderErrorCode); code != "" {
		st, _ := strconv.Atoi(code)
		if st == 0 {
			st = 500
		}
		return Reply{Status: st, Text: msg.Header.Get(wire.HeaderError), Body: msg.Data}, nil
	}
	return Reply{Status: http.StatusOK, Text: "OK", Body: msg.Data}, nil
}

// HTTPConfig configures the Transport over the HTTP gateway (HTTP).
type HTTPConfig struct {
	// URLs are the brokers' gateways ("http://127.0.0.1:6632"; required,
	// at least one). Requests go to the first; after a request no broker
	// answered (a *NoAnswerError) the next ones go to the next URL, round
	// the list, so a client of several brokers moves off one that died.
	URLs []string
	// Client sends the requests (default http.DefaultClient); its
	// Transport's pool bounds the connections per broker.
	Client *http.Client
	// TLS, when Client is nil, is the TLS configuration of https:// URLs
	// (TrustCA: a private CA's broker certificates): requests then go
	// through a clone of http.DefaultTransport using it. Nil: the system's
	// roots.
	TLS *tls.Config
}

// httpTransport is Transport over the HTTP gateway.
type httpTransport struct {
	bases []string
	hc    *http.Client
	cur   atomic.Int64
}

// HTTP is the Transport over the HTTP gateway(s) of cfg (SPEC.md §3, §4).
// An empty URL list answers every request queen.ErrUnavailable.
func HTTP(cfg HTTPConfig) Transport {
	t := &httpTransport{hc: cfg.Client}
	if t.hc == nil && cfg.TLS != nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = cfg.TLS.Clone() // the transport adds its ALPN protocols to it
		t.hc = &http.Client{Transport: tr}
	}
	if t.hc == nil {
		t.hc = http.DefaultClient
	}
	for _, u := range cfg.URLs {
		t.bases = append(t.bases, strings.TrimRight(u, "/"))
	}
	return t
}

func (t *httpTransport) RoundTrip(ctx context.Context, r *Request) (Reply, error) {
	if len(t.bases) == 0 {
		return Reply{}, noAnswer(queen.ErrUnavailable.With("no HTTP gateway to send %s %s to", r.Method, r.Path))
	}
	at := t.cur.Load()
	u := t.bases[int(at)%len(t.bases)] + r.Path
	var rd io.Reader
	if r.Body != nil {
		rd = bytes.NewReader(r.Body)
	}
	req, err := http.NewRequestWithContext(ctx, r.Method, u, rd)
	if err != nil {
		return Reply{}, queen.ErrInvalidField.With("%s %s: %v", r.Method, u, err)
	}
	if r.Body != nil {
		req.Header.Set(wire.HeaderContentType, wire.ContentTypeJSON)
	}
	if r.Token != "" {
		req.Header.Set(wire.HeaderAuthorization, "Bearer "+r.Token)
	}
	failed := func(e *queen.Error) (Reply, error) {
		if len(t.bases) > 1 {
			t.cur.CompareAndSwap(at, at+1) // move on once per failure seen
		}
		return Reply{}, noAnswer(e)
	}
	resp, err := t.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return failed(queen.ErrTimeout.With("%s %s: %v", r.Method, u, err))
		}
		return failed(queen.ErrUnavailable.With("%s %s: %v", r.Method, u, err))
	}
	data, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return failed(queen.ErrTimeout.With("%s %s: reading the reply: %v", r.Method, u, err))
	}
	return Reply{Status: resp.StatusCode, Text: http.StatusText(resp.StatusCode), Body: data}, nil
}
