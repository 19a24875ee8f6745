package transport

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/metrics"
	"github.com/queen-mq/queen-go/transport/auth"
	"github.com/queen-mq/queen-go/transport/wire"
)

// Pusher routes validated push items to their partitions (shards.Router).
type Pusher interface {
	// Push returns one verdict per item, in order.
	Push(ctx context.Context, items []*queen.Item) []queen.Result
}

// Queues is the queue administration the transports need (persistence.Store).
type Queues interface {
	Configure(ctx context.Context, req queen.ConfigureRequest) (queen.ConfigureResult, error)
	Queue(ctx context.Context, name string) (queen.QueueInfo, error)
	Ping(ctx context.Context) error
}

// Config configures the transports' shared request handling.
type Config struct {
	Pusher Pusher
	Queues Queues
	// Consumer serves pops, acks, leases, transactions, the DLQ and
	// queue/group administration (SPEC.md §4, §5).
	Consumer Consumer
	// OnPushed, when set, is told of every push's results (the broker wakes
	// long polls with it, here and on other brokers).
	OnPushed func(items []*queen.Item, results []queen.Result)
	// OnQueueDeleted, when set, is told of a deleted queue.
	OnQueueDeleted func(queue string)
	// DedupCache, when set, is the dedup cache's kill switch and stats
	// (/api/v1/admin/dedup-cache, /health).
	DedupCache CacheSwitch
	// Cluster, when set, answers GET /api/v1/cluster and queen.v1.cluster.
	Cluster ClusterViewer
	// Operator, when set, answers the operator API of SPEC.md §13 (the
	// dedup inspector); unset, its routes answer 404.
	Operator Operator
	// AdminToken (QUEEN_ADMIN_TOKEN), when not empty, guards the admin
	// routes and subjects (adminRoutes, SPEC.md §13): each needs
	// "Authorization: Bearer <AdminToken>" (an HTTP header, or a NATS
	// message header), else 401 unauthorized. The message plane (push, pop,
	// ack, lease extension, transaction, configure, DLQ listing, traces,
	// /health, /metrics) never asks for it.
	AdminToken string
	// JWT, when set, turns on JWT authentication and roles (JWT_ENABLED,
	// SPEC.md §14): every route and subject but the public ones needs a
	// bearer token reaching its level (Handler, NewNATS), pushes carry the
	// token's "sub" as their items' queen.Item.ProducerSub, and AdminToken
	// is not consulted. Nil: JWT off, AdminToken as above.
	JWT *auth.Verifier
	// Partitions, when set, returns the partition actors' counts (active,
	// passivated) for /health, as JSON-encodable value.
	Partitions func() any
	// Build is the broker's release, revision, schema version and layout
	// generation, reported by /health (SPEC.md §2).
	Build queen.Build
	// NATS, when set, reports the broker's NATS connections for /health
	// ("nats"): "ok" while connected, otherwise their state in lower case
	// ("reconnecting" while no NATS server is reachable, "closed", ...),
	// which makes /health answer 200 with "status":"degraded": pushes for
	// other brokers' shards are then answered 503 nats_unavailable
	// (docs/contract.md §9). Unset: no "nats" field.
	NATS func() string
	// StorageFull, when set, reports whether the database is out of disk
	// space as far as the broker last saw (persistence.Store.StorageFull),
	// for /health ("storage": "ok" or "full"); full makes it answer 200
	// with "status":"degraded" (pushes are answered 503 storage_full).
	// Unset: no "storage" field.
	StorageFull func() bool
	// MaxPayloadBytes is QUEEN_MAX_PAYLOAD_BYTES; default queen.DefaultMaxPayloadBytes.
	MaxPayloadBytes int
	// MaxInFlightBodyBytes bounds the push and transaction bodies being read
	// or handled at once, bytes (each is copied a few times on its way to
	// PostgreSQL). An HTTP body counts from its first byte, as its buffer
	// grows (never by its declared Content-Length), until it is answered; a
	// request that would exceed the budget, or its address's share of it (a
	// quarter), is answered 503 overloaded with Retry-After (readAdmitted).
	// A request is admitted whatever its size while no other holds any
	// budget. Default DefaultMaxInFlightBodyBytes.
	MaxInFlightBodyBytes int64
	// BodyIdleTimeout cuts off an HTTP push or transaction body from which
	// nothing arrives for this long: 408 body_stalled, nothing written, its
	// budget released. Default DefaultBodyIdleTimeout (5 s).
	BodyIdleTimeout time.Duration
	// MaxParkedPolls bounds the long polls (pops with wait) waiting at once
	// on this broker, HTTP and NATS together; one more is answered 429
	// too_many_polls with Retry-After. Default DefaultMaxParkedPolls.
	MaxParkedPolls int
	// MaxParkedPollsPerClient bounds the long polls of one client waiting
	// at once: an HTTP client by its address, a NATS client by its
	// connection's reply inbox. Default DefaultMaxParkedPollsPerClient.
	MaxParkedPollsPerClient int
	// RequestTimeout bounds one push request end to end; default 60s.
	RequestTimeout time.Duration
	Metrics        *metrics.Set
	Logger         *slog.Logger
}

// DefaultMaxInFlightBodyBytes is Config.MaxInFlightBodyBytes's default,
// 128 MiB: a broker handling that many bytes of bodies holds about 2.5 times
// as much (decoded items, frames, the statement to PostgreSQL), which stays
// inside serve's soft memory limit (the dedup cache and partition budgets +
// 160 MiB) while the cache is small (80 concurrent 15 MiB uploads: README,
// Settings).
const DefaultMaxInFlightBodyBytes = 128 << 20

// Service holds the request logic both transports share: same JSON bodies,
// same verdicts, same errors.
type Service struct {
	cfg      Config
	inFlight atomic.Int64 // push body bytes being handled
	// addrHeld is the bytes of inFlight each client address holds while
	// its bodies are read and handled (readAdmitted's per-address share).
	addrMu   sync.Mutex
	addrHeld map[string]int64
	// polling counts the long polls parked now, pollsOf those of each
	// client (parkPoll).
	pollMu  sync.Mutex
	polling int
	pollsOf map[string]int
	// polls ends parked long polls at shutdown (StopPolls).
	polls     context.Context
	stopPolls context.CancelFunc
	// adminToken is the SHA-256 of Config.AdminToken; nil: no token.
	adminToken *[32]byte
	// statsRing keeps GET /api/v1/stats's samples (stats.go).
	statsRing statsRing
	// replays holds a token per DLQ replay running (maxReplays).
	replays chan struct{}
}

// NewService returns a Service; zero Config fields take their defaults.
func NewService(cfg Config) *Service {
	if cfg.MaxPayloadBytes <= 0 {
		cfg.MaxPayloadBytes = queen.DefaultMaxPayloadBytes
	}
	if cfg.MaxInFlightBodyBytes <= 0 {
		cfg.MaxInFlightBodyBytes = DefaultMaxInFlightBodyBytes
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = 60 * time.Second
	}
	if cfg.BodyIdleTimeout <= 0 {
		cfg.BodyIdleTimeout = DefaultBodyIdleTimeout
	}
	if cfg.MaxParkedPolls <= 0 {
		cfg.MaxParkedPolls = DefaultMaxParkedPolls
	}
	if cfg.MaxParkedPollsPerClient <= 0 {
		cfg.MaxParkedPollsPerClient = DefaultMaxParkedPollsPerClient
	}
	if cfg.Metrics == nil {
		cfg.Metrics = metrics.New()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	polls, stop := context.WithCancel(context.Background())
	s := &Service{cfg: cfg, polls: polls, stopPolls: stop, replays: make(chan struct{}, maxReplays), addrHeld: map[string]int64{}, pollsOf: map[string]int{}}
	// Registered once per registry: a second Service on the same metrics
	// keeps the first one's gauge.
	_ = cfg.Metrics.Registry.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "queen_push_inflight_body_bytes",
		Help: "Bytes of push and transaction bodies held in the in-flight budget now (read or being read, until answered).",
	}, func() float64 { return float64(s.inFlight.Load()) }))
	if cfg.AdminToken != "" {
		sum := sha256.Sum256([]byte(cfg.AdminToken))
		s.adminToken = &sum
	}
	return s
}

// InFlightBodyBytes is how many bytes of push and transaction bodies hold
// the in-flight budget now (Config.MaxInFlightBodyBytes): read, or being
// read, and not yet answered. Exported as queen_push_inflight_body_bytes.
func (s *Service) InFlightBodyBytes() int64 { return s.inFlight.Load() }

// StopPolls answers every parked long poll now (empty) and every later one
// at once, so a shutdown does not wait for poll timeouts.
func (s *Service) StopPolls() { s.stopPolls() }

// reply is a transport-neutral answer: status, JSON body, and whether the
// client should retry after a pause (Retry-After).
type reply struct {
	status     int
	body       any
	retryAfter bool
}

func errReply(err error) reply {
	e := queen.AsError(err)
	return reply{status: e.Status, body: e, retryAfter: e.Retryable && (e.Status == http.StatusServiceUnavailable || e.Status == http.StatusTooManyRequests)}
}

// admit takes n more bytes of the in-flight body budget for a request that
// already holds held bytes of it, or reports overload (false, nothing
// taken). A request is always admitted when no other request holds any of
// the budget, whatever its size, so one large body is never refused forever.
func (s *Service) admit(n, held int64) bool {
	total := s.inFlight.Add(n)
	if total > s.cfg.MaxInFlightBodyBytes && total != held+n {
		s.inFlight.Add(-n)
		s.cfg.Metrics.Overloads.Inc()
		return false
	}
	return true
}

// readChunk is the first step of a body's buffer in readAdmitted: the
// budget grows with the buffer, from the first byte, doubling each step.
const readChunk = 64 << 10

// DefaultMaxParkedPolls and DefaultMaxParkedPollsPerClient are the caps
// on waiting long polls (Config.MaxParkedPolls, MaxParkedPollsPerClient):
// a parked HTTP poll costs about 36 KiB (its connection, goroutines and
// buffers), so 10,000 stay within about 360 MiB.
const (
	DefaultMaxParkedPolls          = 10000
	DefaultMaxParkedPollsPerClient = 1000
)

// DefaultBodyIdleTimeout is Config.BodyIdleTimeout's default.
const DefaultBodyIdleTimeout = 5 * time.Second

// readAdmitted reads an HTTP push or transaction body inside the in-flight
// body budget (Config.MaxInFlightBodyBytes), which counts it from its first
// byte until release is called (after the reply is written). The body is
// counted as it arrives, by the capacity of the buffer holding it (64 KiB,
// then doubling, never past a declared Content-Length), never by what it
// declares: a client that announces 16 MiB and sends a byte at a time holds
// 64 KiB, not 16 MiB (issue 38: eight such sockets held the whole budget).
//
//   - a declared length over queen.MaxBodyBytes is refused at once with 413,
//     unread; past queen.MaxBodyBytes as it arrives (chunked), 413.
//   - a growth step over the budget ends the read with 503 overloaded and
//     Retry-After; so does one that would take the client's address past
//     its share, a quarter of the budget (at least queen.MaxBodyBytes):
//     one address cannot starve the others.
//   - a body from which nothing arrives for Config.BodyIdleTimeout is cut
//     off: 408 body_stalled (retryable), and its bytes are released.
//
// ok false: rep is the reply to write (nothing is held).
func (s *Service) readAdmitted(w http.ResponseWriter, r *http.Request) (body []byte, release func(), rep reply, ok bool) {
	n := r.ContentLength
	if n > queen.MaxBodyBytes {
		return nil, nil, errReply(queen.ErrBodyTooLarge), false
	}
	addr := remoteHost(r.RemoteAddr)
	var held int64
	release = func() {
		s.holdFrom(addr, -held)
		s.inFlight.Add(-held)
	}
	rc := http.NewResponseController(w)
	defer rc.SetReadDeadline(time.Time{}) //nolint:errcheck // ErrNotSupported only where deadlines never applied
	for {
		if len(body) == cap(body) {
			grow := max(int64(cap(body)), readChunk)
			limit := int64(queen.MaxBodyBytes + 1)
			if n >= 0 {
				limit = n + 1 // room to read the EOF after the declared bytes
			}
			grow = min(grow, limit-held)
			if grow <= 0 {
				release()
				return nil, nil, errReply(queen.ErrBodyTooLarge), false
			}
			if !s.admitFrom(addr, grow, held) {
				release()
				return nil, nil, s.overloaded(), false
			}
			held += grow
			nb := make([]byte, len(body), held)
			copy(nb, body)
			body = nb
		}
		_ = rc.SetReadDeadline(time.Now().Add(s.cfg.BodyIdleTimeout))
		k, err := r.Body.Read(body[len(body):cap(body)])
		body = body[:len(body)+k]
		if int64(len(body)) > queen.MaxBodyBytes {
			release()
			return nil, nil, errReply(queen.ErrBodyTooLarge), false
		}
		if err == io.EOF {
			return body, release, reply{}, true
		}
		if err != nil {
			release()
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				s.cfg.Metrics.StalledBodies.Inc()
				return nil, nil, errReply(queen.ErrBodyStalled.With("nothing of the request body arrived for %s after %d bytes; nothing was written",
					s.cfg.BodyIdleTimeout, len(body))), false
			}
			return nil, nil, errReply(queen.ErrInvalidJSON.With("reading the request body failed after %d bytes: %v", len(body), err)), false
		}
	}
}

// remoteHost is the host of a request's RemoteAddr ("ip:port"), the key
// of the per-address share of the body budget.
func remoteHost(addr string) string {
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}

// admitFrom is admit for a body from address addr: it also keeps the
// bytes addr holds within its share of the budget (a quarter, at least
// queen.MaxBodyBytes), except when addr holds nothing else.
func (s *Service) admitFrom(addr string, n, held int64) bool {
	share := max(s.cfg.MaxInFlightBodyBytes/4, queen.MaxBodyBytes)
	s.addrMu.Lock()
	mine := s.addrHeld[addr]
	if mine+n > share && mine != held {
		s.addrMu.Unlock()
		s.cfg.Metrics.Overloads.Inc()
		return false
	}
	s.addrHeld[addr] = mine + n
	s.addrMu.Unlock()
	if !s.admit(n, held) {
		s.holdFrom(addr, -n)
		return false
	}
	return true
}

// holdFrom adds n (negative: releases) to the bytes addr holds of the
// body budget; the whole budget (inFlight) is its caller's to adjust.
func (s *Service) holdFrom(addr string, n int64) {
	if n == 0 {
		return
	}
	s.addrMu.Lock()
	if v := s.addrHeld[addr] + n; v > 0 {
		s.addrHeld[addr] = v
	} else {
		delete(s.addrHeld, addr)
	}
	s.addrMu.Unlock()
}

func (s *Service) overloaded() reply {
	return errReply(queen.ErrOverloaded.With("the broker is handling %d bytes of push bodies (limit %d); retry with the same transaction ids",
		s.inFlight.Load(), s.cfg.MaxInFlightBodyBytes))
}

// push handles a push body (SPEC.md §3) that arrived whole (NATS), holding
// its bytes of the in-flight budget while it is handled: 201 with one
// element per item, or 503 with the same array when every item failed
// (503 overloaded when the budget is spent); 4xx for bad input (nothing
// written).
func (s *Service) push(ctx context.Context, body []byte, transport string) reply {
	s.cfg.Metrics.PushRequests.WithLabelValues(transport).Inc()
	if !s.admit(int64(len(body)), 0) {
		return s.overloaded()
	}
	defer s.inFlight.Add(-int64(len(body)))
	return s.pushAdmitted(ctx, body)
}

// pushAdmitted is push for a body that already holds its share of the
// in-flight budget (readAdmitted for HTTP).
func (s *Service) pushAdmitted(ctx context.Context, body []byte) reply {
	items, err := wire.DecodePush(body, s.cfg.MaxPayloadBytes)
	if err != nil {
		return errReply(err)
	}
	if len(items) == 0 {
		return reply{status: http.StatusCreated, body: []wire.PushReply{}}
	}
	sub := producerOf(ctx)
	ptrs := make([]*queen.Item, len(items))
	for i := range items {
		items[i].ProducerSub = sub
		ptrs[i] = &items[i]
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	results := s.cfg.Pusher.Push(ctx, ptrs)
	if s.cfg.OnPushed != nil {
		s.cfg.OnPushed(ptrs, results)
	}
	out := make([]wire.PushReply, len(items))
	failed := 0
	for i := range items {
		out[i] = wire.Reply(i, ptrs[i], results[i])
		if results[i].Verdict == queen.Failed {
			failed++
		}
		if out[i].PayloadMismatch {
			s.cfg.Metrics.DedupPayloadMismatch.WithLabelValues(items[i].Queue).Inc()
		}
	}
	s.countQueues(ptrs, results)
	if failed == len(items) {
		return reply{status: http.StatusServiceUnavailable, body: out, retryAfter: true}
	}
	return reply{status: http.StatusCreated, body: out}
}

// countQueues adds push results to queen_push_items_total (by verdict) and
// queen_queue_push_items_total (by queue and verdict: queued, duplicate,
// failed), the counts behind the queue listing's duplicate rate. It adds
// once per run of consecutive items of one queue, so a request for one queue
// costs at most six label lookups whatever its size; results[i] answers
// items[i].
func (s *Service) countQueues(items []*queen.Item, results []queen.Result) {
	var queue string
	var n, total [3]float64 // queued, duplicate, failed
	verdicts := [3]string{string(queen.Queued), string(queen.Duplicate), string(queen.Failed)}
	flush := func() {
		for k, v := range verdicts {
			if n[k] > 0 {
				s.cfg.Metrics.QueueItems.WithLabelValues(queue, v).Add(n[k])
				total[k] += n[k]
			}
		}
		n = [3]float64{}
	}
	defer func() {
		for k, v := range verdicts {
			if total[k] > 0 {
				s.cfg.Metrics.PushItems.WithLabelValues(v).Add(total[k])
			}
		}
	}()
	for i, it := range items {
		if i >= len(results) {
			break
		}
		if it.Queue != queue {
			flush()
			queue = it.Queue
		}
		switch results[i].Verdict {
		case queen.Queued:
			n[0]++
		case queen.Duplicate:
			n[1]++
		default:
			n[2]++
		}
	}
	flush()
}

// queueCounts reads queen_queue_push_items_total: queue → its queued and
// duplicate counts since this broker started.
func (s *Service) queueCounts() map[string][2]int64 {
	out := map[string][2]int64{}
	ch := make(chan prometheus.Metric, 64)
	go func() {
		s.cfg.Metrics.QueueItems.Collect(ch)
		close(ch)
	}()
	for m := range ch {
		var d dto.Metric
		if m.Write(&d) != nil {
			continue
		}
		q, v := label(&d, "queue"), int64(d.GetCounter().GetValue())
		c := out[q]
		switch label(&d, "verdict") {
		case "queued":
			c[0] += v
		case "duplicate":
			c[1] += v
		}
		out[q] = c
	}
	return out
}

// configure answers POST /api/v1/configure and queen.v1.configure (SPEC.md
// §6). refuse, when not nil, is the refusal of a change that deletes data
// for a caller who may not delete (Service.mayDeleteData: the admin token
// missing or wrong with JWT off, 401; a token below the admin level with
// JWT on, 403); nil when the caller may. A configure of an existing queue
// whose change deletes data or gives up dedup over stored messages
// (queen.Options.DataLoss: retentionSeconds or completedRetentionSeconds
// set or lowered, dedupWindowSeconds lowered or off) is then refused with
// that error, naming the first such option in its field, and writes
// nothing; creating a queue and changes that keep or widen stay open. The
// check runs under the queue's row lock (ConfigureRequest.Guard), so a
// queue created meanwhile by a push is an existing queue.
func (s *Service) configure(ctx context.Context, body []byte, refuse func(queue string, loss []string) *queen.Error) reply {
	req, err := wire.DecodeConfigure(body)
	if err != nil {
		return errReply(err)
	}
	if refuse != nil {
		req.Guard = func(created bool, old, next queen.Options) error {
			if loss := old.DataLoss(next); !created && len(loss) > 0 {
				e := refuse(req.Queue, loss)
				e.Field = "options." + strings.Fields(loss[0])[0]
				return e
			}
			return nil
		}
	}
	res, err := s.cfg.Queues.Configure(ctx, req)
	if err != nil {
		return errReply(err)
	}
	return reply{status: http.StatusOK, body: wire.NewConfigureReply(res)}
}

func (s *Service) queue(ctx context.Context, name string) reply {
	if err := queen.ValidateName(name, "queue"); err != nil {
		return errReply(err)
	}
	qi, err := s.cfg.Queues.Queue(ctx, name)
	if err != nil {
		return errReply(err)
	}
	return reply{status: http.StatusOK, body: qi}
}

// ClusterViewer lists the cluster's brokers and shard leases
// (shards.Membership).
type ClusterViewer interface {
	ClusterView(ctx context.Context) (queen.ClusterView, error)
}

// cluster answers GET /api/v1/cluster: brokers with heartbeat expiries,
// every shard's owner and lease expiry, as PostgreSQL records them.
func (s *Service) cluster(ctx context.Context) reply {
	if s.cfg.Cluster == nil {
		return errReply(queen.ErrNotFound.With("this broker has no cluster view"))
	}
	v, err := s.cfg.Cluster.ClusterView(ctx)
	if err != nil {
		return errReply(err)
	}
	return reply{status: http.StatusOK, body: v}
}

// CacheSwitch is the broker-side dedup cache seen from the transports.
type CacheSwitch interface {
	SetEnabled(on bool)
	Stats() any
}

// dedupCache answers GET (body nil) and POST {"enabled":bool} on the
// cache's admin route: the stats after the change.
func (s *Service) dedupCache(body []byte) reply {
	if s.cfg.DedupCache == nil {
		return errReply(queen.ErrNotFound.With("this broker has no dedup cache"))
	}
	if body != nil {
		on, err := wire.DecodeCacheSwitch(body)
		if err != nil {
			return errReply(err)
		}
		s.cfg.DedupCache.SetEnabled(on)
		s.cfg.Logger.Info("dedup cache switched", "enabled", on)
	}
	return reply{status: http.StatusOK, body: s.cfg.DedupCache.Stats()}
}

// health answers GET /health: 503 "unhealthy" when PostgreSQL does not
// answer a ping within 2 s; else 200, "degraded" while the NATS connection is
// down or the database is out of disk space (the broker serves what it can:
// pops, acks and pushes for its own shards, or every read), "healthy"
// otherwise. A degraded broker stays 200 so that a load balancer keeps it:
// every broker of a cluster sees the same outage.
func (s *Service) health(ctx context.Context) reply {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	h := wire.HealthReply{Status: "healthy", Database: "ok", Build: s.cfg.Build}
	if s.cfg.NATS != nil {
		if h.NATS = s.cfg.NATS(); h.NATS != "ok" {
			h.Status = "degraded"
		}
	}
	if s.cfg.StorageFull != nil {
		h.Storage = "ok"
		if s.cfg.StorageFull() {
			h.Storage, h.Status = "full", "degraded"
		}
	}
	if err := s.cfg.Queues.Ping(ctx); err != nil {
		h.Status, h.Database, h.Error = "unhealthy", "down", err.Error()
		return reply{status: http.StatusServiceUnavailable, body: h}
	}
	if s.cfg.DedupCache != nil {
		h.DedupCache = s.cfg.DedupCache.Stats()
	}
	if s.cfg.Partitions != nil {
		h.Partitions = s.cfg.Partitions()
	}
	return reply{status: http.StatusOK, body: h}
}

func mustJSON(v any) []byte {
	if v == nil {
		return nil
	}
	if rs, ok := v.([]wire.PushReply); ok {
		return wire.AppendPushReplies(make([]byte, 0, 256*len(rs)), rs)
	}
	b, err := json.Marshal(v)
	if err != nil {
		b, _ = json.Marshal(queen.ErrInternal.With("encode reply: %v", err))
	}
	return b
}
