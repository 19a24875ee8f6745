package transport

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/transport/auth"
	"github.com/queen-mq/queen-go/transport/console"
	"github.com/queen-mq/queen-go/transport/wire"
)

// Handler returns the HTTP gateway on the Queen routes, those listed by
// routes (each with its method, pattern and a line saying what it does). A
// known path asked with another method answers 405 with the Allow header
// listing its methods (the subtree /ui/ and / excepted); any other path 404.
//
// Bodies over queen.MaxBodyBytes are refused with 413.
//
// With JWT on (Config.JWT, SPEC.md §14) every route but the public ones
// (/health, /metrics, the console's files under /ui/ and the redirect of /,
// plus JWT_SKIP_PATHS) needs "Authorization: Bearer <JWT>" reaching the
// route's level (level in the table): read-only for the status and resource
// reads and /api/v1/auth/whoami (any valid token), read-write for push, pop, ack, lease extension, transactions,
// traces, seeks and configures, admin for the DLQ, the operator API, the
// dedup cache switch and deletes; a configure of an existing queue that
// deletes data needs admin too (Service.configure). Without a valid token:
// 401 unauthorized saying why; with one whose roles fall short: 403
// forbidden. Both are answered before the body is read, so nothing is
// written. QUEEN_ADMIN_TOKEN is then not consulted.
//
// With JWT off and Config.AdminToken set, the admin routes (admin in the
// table: every /api/v1/resources/queues route, the /api/v1/consumer-groups
// routes, /api/v1/admin/dedup-cache, /api/v1/cluster, /api/v1/stats, the
// /api/v1/queues routes, the DLQ listing /api/v1/dlq, /api/v1/auth/whoami and
// the operator routes of SPEC.md §13) answer 401 unauthorized without
// "Authorization: Bearer <token>"; so does a configure of an existing queue that deletes data
// (Service.configure). Push, pop, ack and the rest of the message plane
// never ask for it.
func (s *Service) Handler() http.Handler {
	mux := http.NewServeMux()
	var paths []string
	allow := map[string]string{}
	for _, rt := range s.routes() {
		h := rt.h
		switch {
		case s.cfg.JWT != nil:
			h = s.jwtGuard(rt, h)
		case rt.admin:
			h = s.admin(h.ServeHTTP)
		}
		mux.Handle(rt.method+" "+rt.path, h)
		if strings.HasSuffix(rt.path, "/") || strings.HasSuffix(rt.path, "{$}") {
			continue // not one path: no 405 for it
		}
		if allow[rt.path] == "" {
			paths = append(paths, rt.path)
			allow[rt.path] = rt.method
		} else {
			allow[rt.path] += ", " + rt.method
		}
	}
	for _, p := range paths {
		methods := allow[p]
		mux.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", methods)
			writeReply(w, errReply(queen.ErrMethodNotAllowed.With("%s %s: use %s", r.Method, r.URL.Path, methods)))
		})
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeReply(w, errReply(queen.ErrNotFound.With("no route %s %s", r.Method, r.URL.Path)))
	})
	return mux
}

// route is one route of the HTTP gateway: method and path (a net/http
// ServeMux pattern), whether it is an admin route (Config.AdminToken, JWT
// off), its access level with JWT on (Config.JWT, SPEC.md §14), what it
// does, and its handler.
type route struct {
	method, path string
	admin        bool
	level        auth.Level
	doc          string
	h            http.Handler
}

// routes is the one list of the gateway's routes; Handler registers them,
// their Allow lists and their admin checks from it.
func (s *Service) routes() []route {
	body := func(f func(r *http.Request, body []byte) reply) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if b, ok := readBody(w, r); ok {
				writeReply(w, f(r, b))
			}
		}
	}
	get := func(f func(r *http.Request) reply) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) { writeReply(w, f(r)) }
	}
	pop := func(r *http.Request) reply {
		req, err := wire.DecodePopQuery(r.PathValue("queue"), r.PathValue("partition"), r.URL.Query())
		return s.pop(context.WithValue(r.Context(), clientKey{}, "http:"+remoteHost(r.RemoteAddr)), req, err)
	}
	return []route{
		{"POST", "/api/v1/push", false, auth.ReadWrite, "a push (SPEC.md §3)", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			s.cfg.Metrics.PushRequests.WithLabelValues("http").Inc()
			b, release, rep, ok := s.readAdmitted(w, r)
			if !ok {
				writeReply(w, rep)
				return
			}
			defer release()
			writeReply(w, s.pushAdmitted(r.Context(), b))
		})},
		{"POST", "/api/v1/configure", false, auth.ReadWrite, "configure a queue (SPEC.md §6); a change of an existing queue that deletes data needs the admin token (JWT on: the admin level)", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if b, ok := readBody(w, r); ok {
				rep := s.configure(r.Context(), b, s.mayDeleteData(r.Context(), r.Header.Get("Authorization")))
				setChallenge(w, rep)
				writeReply(w, rep)
			}
		})},
		{"GET", "/api/v1/resources/queues/{queue}", true, auth.ReadOnly, "a queue with its effective options", get(func(r *http.Request) reply { return s.queue(r.Context(), r.PathValue("queue")) })},
		{"GET", "/api/v1/pop", false, auth.ReadWrite, "?namespace=&task=: pop any queue with those labels", get(pop)},
		{"GET", "/api/v1/pop/queue/{queue}", false, auth.ReadWrite, "pop (SPEC.md §4): 200, or 204 when nothing is available", get(pop)},
		{"GET", "/api/v1/pop/queue/{queue}/partition/{partition}", false, auth.ReadWrite, "pop one partition", get(pop)},
		{"POST", "/api/v1/ack", false, auth.ReadWrite, "an ack as an offset commit", body(func(r *http.Request, b []byte) reply { return s.ack(r.Context(), b) })},
		{"POST", "/api/v1/ack/batch", false, auth.ReadWrite, "acks, per-item results in order", body(func(r *http.Request, b []byte) reply { return s.ackBatch(r.Context(), b) })},
		{"POST", "/api/v1/lease/{lease}/extend", false, auth.ReadWrite, `{"seconds":N}; 409 lease_invalid when not live`, body(func(r *http.Request, b []byte) reply {
			return s.extendLease(r.Context(), r.PathValue("lease"), b)
		})},
		{"POST", "/api/v1/transaction", false, auth.ReadWrite, "pushes and acks in one PostgreSQL transaction (SPEC.md §5)", http.HandlerFunc(s.handleTransaction)},
		{"POST", "/api/v1/traces", false, auth.ReadWrite, "a message trace event: validated, 202, not kept (see Service.trace)", body(func(_ *http.Request, b []byte) reply { return s.trace(b) })},
		{"GET", "/api/v1/dlq", true, auth.Admin, "?queue=&consumerGroup=&limit=&offset=: dead letters (payloads included)", get(func(r *http.Request) reply { return s.deadLetters(r.Context(), r.URL.Query()) })},
		{"GET", "/api/v1/resources/queues", true, auth.ReadOnly, "queues with partition counts and depth", get(func(r *http.Request) reply { return s.listQueues(r.Context()) })},
		{"DELETE", "/api/v1/resources/queues/{queue}", true, auth.Admin, "the queue and everything it owns (200 either way)", get(func(r *http.Request) reply { return s.deleteQueue(r.Context(), r.PathValue("queue")) })},
		{"DELETE", "/api/v1/consumer-groups/{group}", true, auth.Admin, "the group's cursors", get(func(r *http.Request) reply { return s.deleteGroup(r.Context(), r.PathValue("group")) })},
		{"POST", "/api/v1/consumer-groups/{group}/queues/{queue}/seek", true, auth.ReadWrite, `{"toEnd":true} | {"timestamp":"..."} | {"mode":"end"|"beginning"}`, body(func(r *http.Request, b []byte) reply {
			return s.seek(r.Context(), r.PathValue("group"), r.PathValue("queue"), b)
		})},
		{"POST", "/api/v1/consumer-groups/{group}/subscription", true, auth.ReadWrite, `{"subscriptionTimestamp":"..."}: a timestamp seek on every queue of the group`, body(func(r *http.Request, b []byte) reply {
			return s.setSubscription(r.Context(), r.PathValue("group"), b)
		})},
		{"GET", "/api/v1/admin/dedup-cache", true, auth.Admin, "the dedup cache's stats", get(func(*http.Request) reply { return s.dedupCache(nil) })},
		{"POST", "/api/v1/admin/dedup-cache", true, auth.Admin, `{"enabled":false}: the dedup cache's live kill switch`, body(func(_ *http.Request, b []byte) reply { return s.dedupCache(b) })},
		{"GET", "/api/v1/cluster", true, auth.ReadOnly, "brokers, shard owners and lease expiries (SPEC.md §9)", get(func(r *http.Request) reply { return s.cluster(r.Context()) })},
		{"GET", "/api/v1/dedup", true, auth.Admin, "?queue=&partition=&transactionId=: the dedup inspector (SPEC.md §13)", get(func(r *http.Request) reply {
			q, err := wire.DecodeDedupQuery(r.URL.Query())
			return s.dedup(r.Context(), q, err)
		})},
		{"POST", "/api/v1/dlq/replay", true, auth.Admin, `{"queue","consumerGroup","ids":[...]} or a filter: DLQ replay (SPEC.md §13)`, body(func(r *http.Request, b []byte) reply { return s.replay(r.Context(), b) })},
		{"GET", "/api/v1/queues/{queue}", true, auth.ReadOnly, "partitions and consumer groups' cursors and lag (queen.QueueDetail)", get(func(r *http.Request) reply { return s.queueDetail(r.Context(), r.PathValue("queue")) })},
		{"GET", "/api/v1/queues/{queue}/messages", true, auth.ReadOnly, "?partition=&after=&limit=: a read-only peek at stored messages (queen.PeekResult)", get(func(r *http.Request) reply {
			q, err := wire.DecodePeekQuery(r.PathValue("queue"), r.URL.Query())
			return s.peek(r.Context(), q, err)
		})},
		{"GET", "/api/v1/stats", true, auth.ReadOnly, "live push/pop/ack rates, commit p50 and p99, RSS, dedup-cache bytes (the console's overview and timeline; stats.go)", get(func(*http.Request) reply { return s.stats() })},
		{"GET", "/api/v1/auth/whoami", true, auth.ReadOnly, "who the presented credential is: access (jwt, admin-token, open), sub, role (its level), roles, expiresAt (wire.WhoamiReply; the console's sign-in)", http.HandlerFunc(s.whoami)},
		{"GET", "/ui/", false, auth.Public, "the web console (package transport/console)", console.Handler("/ui/")},
		{"GET", "/{$}", false, auth.Public, "redirects to /ui/", http.RedirectHandler("/ui/", http.StatusFound)},
		{"GET", "/health", false, auth.Public, "200 when PostgreSQL answers (status degraded while NATS is down or the database's disk is full), else 503", get(func(r *http.Request) reply { return s.health(r.Context()) })},
		{"GET", "/metrics", false, auth.Public, "Prometheus text", promhttp.HandlerFor(s.cfg.Metrics.Registry, promhttp.HandlerOpts{})},
	}
}

func readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, queen.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeReply(w, errReply(queen.ErrBodyTooLarge))
		} else {
			writeReply(w, errReply(queen.ErrInvalidJSON.With("reading the request body failed: %v", err)))
		}
		return nil, false
	}
	return body, true
}

func writeReply(w http.ResponseWriter, rep reply) {
	w.Header().Set("Content-Type", "application/json")
	if rep.retryAfter {
		w.Header().Set("Retry-After", "1")
	}
	if rep.status == http.StatusNoContent {
		w.Header().Del("Content-Type")
		w.WriteHeader(rep.status)
		return
	}
	w.WriteHeader(rep.status)
	w.Write(mustJSON(rep.body)) //nolint:errcheck // the client went away
}
