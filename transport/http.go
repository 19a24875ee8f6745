package transport

import (
	"errors"
	"io"
	"net/http"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/transport/console"
	"github.com/queen-mq/queen-go/transport/wire"
)

// Handler returns the HTTP gateway on the Queen routes:
//
//	POST /api/v1/push                        (SPEC.md §3)
//	POST /api/v1/configure                   (SPEC.md §6)
//	GET  /api/v1/resources/queues/{queue}    a queue with its effective options
//	GET  /api/v1/pop/queue/{queue}[/partition/{partition}]  pop (SPEC.md §4): 200, or 204 when nothing is available
//	GET  /api/v1/pop?namespace=&task=        pop any queue with those labels
//	POST /api/v1/ack, /api/v1/ack/batch      acks as offset commits, per-item results in order
//	POST /api/v1/lease/{lease}/extend        {"seconds":N}; 409 lease_invalid when not live
//	POST /api/v1/transaction                 pushes and acks in one PostgreSQL transaction (SPEC.md §5)
//	POST /api/v1/traces                      a message trace event: validated, 202, not kept (see Service.trace)
//	GET  /api/v1/dlq?queue=&consumerGroup=&limit=&offset=
//	GET  /api/v1/resources/queues            queues with partition counts and depth
//	DELETE /api/v1/resources/queues/{queue}  the queue and everything it owns (200 either way)
//	DELETE /api/v1/consumer-groups/{group}   the group's cursors
//	POST /api/v1/consumer-groups/{group}/queues/{queue}/seek  {"toEnd":true} | {"timestamp":"..."} | {"mode":"end"|"beginning"}
//	POST /api/v1/consumer-groups/{group}/subscription  {"subscriptionTimestamp":"..."}: a timestamp seek on every queue of the group
//	GET|POST /api/v1/admin/dedup-cache      the dedup cache's stats; {"enabled":false} is the live kill switch
//	GET  /api/v1/cluster                     brokers, shard owners and lease expiries (SPEC.md §9)
//	GET  /api/v1/dedup?queue=&partition=&transactionId=  the dedup inspector (SPEC.md §13)
//	POST /api/v1/dlq/replay                  {"queue","consumerGroup","ids":[...]} or a filter: DLQ replay (SPEC.md §13)
//	GET  /api/v1/queues/{queue}              partitions and consumer groups' cursors and lag (queen.QueueDetail)
//	GET  /api/v1/queues/{queue}/messages?partition=&after=&limit=  a read-only peek at stored messages (queen.PeekResult)
//	GET  /api/v1/stats                       live push/pop rates, commit p99, RSS, dedup-cache bytes (the console's overview; stats.go)
//	GET  /ui/                                the web console (package transport/console); GET / redirects there
//	GET  /health                             200 when PostgreSQL answers, else 503
//	GET  /metrics                            Prometheus text
//
// Bodies over queen.MaxBodyBytes are refused with 413. With
// Config.AdminToken set, the admin routes — every /api/v1/resources/queues
// route, the /api/v1/consumer-groups routes, /api/v1/admin/dedup-cache,
// /api/v1/cluster, /api/v1/stats, the /api/v1/queues routes and the operator routes of
// SPEC.md §13 (/api/v1/dedup, /api/v1/dlq/replay) — answer 401 unauthorized without
// "Authorization: Bearer <token>"; the message plane never asks for it.
func (s *Service) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/v1/push", func(w http.ResponseWriter, r *http.Request) {
		if !s.admitDeclared(r) {
			writeReply(w, s.overloaded())
			return
		}
		body, ok := readBody(w, r)
		if ok {
			writeReply(w, s.push(r.Context(), body, "http"))
		}
	})
	mux.HandleFunc("POST /api/v1/configure", func(w http.ResponseWriter, r *http.Request) {
		body, ok := readBody(w, r)
		if ok {
			writeReply(w, s.configure(r.Context(), body))
		}
	})
	mux.HandleFunc("GET /api/v1/resources/queues/{queue}", s.admin(func(w http.ResponseWriter, r *http.Request) {
		writeReply(w, s.queue(r.Context(), r.PathValue("queue")))
	}))
	mux.HandleFunc("GET /api/v1/pop", func(w http.ResponseWriter, r *http.Request) {
		req, err := wire.DecodePopQuery("", "", r.URL.Query())
		writeReply(w, s.pop(r.Context(), req, err))
	})
	mux.HandleFunc("GET /api/v1/pop/queue/{queue}", func(w http.ResponseWriter, r *http.Request) {
		req, err := wire.DecodePopQuery(r.PathValue("queue"), "", r.URL.Query())
		writeReply(w, s.pop(r.Context(), req, err))
	})
	mux.HandleFunc("GET /api/v1/pop/queue/{queue}/partition/{partition}", func(w http.ResponseWriter, r *http.Request) {
		req, err := wire.DecodePopQuery(r.PathValue("queue"), r.PathValue("partition"), r.URL.Query())
		writeReply(w, s.pop(r.Context(), req, err))
	})
	mux.HandleFunc("POST /api/v1/ack", func(w http.ResponseWriter, r *http.Request) {
		if body, ok := readBody(w, r); ok {
			writeReply(w, s.ack(r.Context(), body))
		}
	})
	mux.HandleFunc("POST /api/v1/ack/batch", func(w http.ResponseWriter, r *http.Request) {
		if body, ok := readBody(w, r); ok {
			writeReply(w, s.ackBatch(r.Context(), body))
		}
	})
	mux.HandleFunc("POST /api/v1/lease/{lease}/extend", func(w http.ResponseWriter, r *http.Request) {
		if body, ok := readBody(w, r); ok {
			writeReply(w, s.extendLease(r.Context(), r.PathValue("lease"), body))
		}
	})
	mux.HandleFunc("POST /api/v1/transaction", s.handleTransaction)
	mux.HandleFunc("POST /api/v1/traces", func(w http.ResponseWriter, r *http.Request) {
		if body, ok := readBody(w, r); ok {
			writeReply(w, s.trace(body))
		}
	})
	mux.HandleFunc("GET /api/v1/dlq", func(w http.ResponseWriter, r *http.Request) {
		writeReply(w, s.deadLetters(r.Context(), r.URL.Query()))
	})
	mux.HandleFunc("GET /api/v1/resources/queues", s.admin(func(w http.ResponseWriter, r *http.Request) {
		writeReply(w, s.listQueues(r.Context()))
	}))
	mux.HandleFunc("DELETE /api/v1/resources/queues/{queue}", s.admin(func(w http.ResponseWriter, r *http.Request) {
		writeReply(w, s.deleteQueue(r.Context(), r.PathValue("queue")))
	}))
	mux.HandleFunc("DELETE /api/v1/consumer-groups/{group}", s.admin(func(w http.ResponseWriter, r *http.Request) {
		writeReply(w, s.deleteGroup(r.Context(), r.PathValue("group")))
	}))
	mux.HandleFunc("POST /api/v1/consumer-groups/{group}/queues/{queue}/seek", s.admin(func(w http.ResponseWriter, r *http.Request) {
		if body, ok := readBody(w, r); ok {
			writeReply(w, s.seek(r.Context(), r.PathValue("group"), r.PathValue("queue"), body))
		}
	}))
	mux.HandleFunc("GET /api/v1/admin/dedup-cache", s.admin(func(w http.ResponseWriter, r *http.Request) {
		writeReply(w, s.dedupCache(nil))
	}))
	mux.HandleFunc("POST /api/v1/admin/dedup-cache", s.admin(func(w http.ResponseWriter, r *http.Request) {
		if body, ok := readBody(w, r); ok {
			writeReply(w, s.dedupCache(body))
		}
	}))
	mux.HandleFunc("POST /api/v1/consumer-groups/{group}/subscription", s.admin(func(w http.ResponseWriter, r *http.Request) {
		if body, ok := readBody(w, r); ok {
			writeReply(w, s.setSubscription(r.Context(), r.PathValue("group"), body))
		}
	}))
	mux.HandleFunc("GET /api/v1/cluster", s.admin(func(w http.ResponseWriter, r *http.Request) {
		writeReply(w, s.cluster(r.Context()))
	}))
	mux.HandleFunc("GET /api/v1/dedup", s.admin(func(w http.ResponseWriter, r *http.Request) {
		q, err := wire.DecodeDedupQuery(r.URL.Query())
		writeReply(w, s.dedup(r.Context(), q, err))
	}))
	mux.HandleFunc("POST /api/v1/dlq/replay", s.admin(func(w http.ResponseWriter, r *http.Request) {
		if body, ok := readBody(w, r); ok {
			writeReply(w, s.replay(r.Context(), body))
		}
	}))
	mux.HandleFunc("GET /api/v1/queues/{queue}", s.admin(func(w http.ResponseWriter, r *http.Request) {
		writeReply(w, s.queueDetail(r.Context(), r.PathValue("queue")))
	}))
	mux.HandleFunc("GET /api/v1/queues/{queue}/messages", s.admin(func(w http.ResponseWriter, r *http.Request) {
		q, err := wire.DecodePeekQuery(r.PathValue("queue"), r.URL.Query())
		writeReply(w, s.peek(r.Context(), q, err))
	}))
	mux.HandleFunc("GET /api/v1/stats", s.admin(func(w http.ResponseWriter, r *http.Request) {
		writeReply(w, s.stats())
	}))
	mux.Handle("GET /ui/", console.Handler("/ui/"))
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/ui/", http.StatusFound)
	})
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		writeReply(w, s.health(r.Context()))
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.cfg.Metrics.Registry, promhttp.HandlerOpts{}))
	for _, route := range []struct{ path, allow string }{
		{"/api/v1/push", "POST"}, {"/api/v1/configure", "POST"}, {"/api/v1/resources/queues/{queue}", "GET, DELETE"},
		{"/api/v1/resources/queues", "GET"}, {"/api/v1/pop/queue/{queue}", "GET"}, {"/api/v1/pop", "GET"},
		{"/api/v1/pop/queue/{queue}/partition/{partition}", "GET"}, {"/api/v1/ack", "POST"}, {"/api/v1/ack/batch", "POST"},
		{"/api/v1/lease/{lease}/extend", "POST"}, {"/api/v1/dlq", "GET"}, {"/api/v1/consumer-groups/{group}", "DELETE"},
		{"/api/v1/consumer-groups/{group}/queues/{queue}/seek", "POST"}, {"/api/v1/consumer-groups/{group}/subscription", "POST"}, {"/api/v1/transaction", "POST"}, {"/api/v1/traces", "POST"},
		{"/api/v1/admin/dedup-cache", "GET, POST"}, {"/health", "GET"}, {"/metrics", "GET"},
		{"/api/v1/cluster", "GET"}, {"/api/v1/stats", "GET"}, {"/api/v1/dedup", "GET"}, {"/api/v1/dlq/replay", "POST"},
		{"/api/v1/queues/{queue}", "GET"}, {"/api/v1/queues/{queue}/messages", "GET"},
	} {
		allow := route.allow
		mux.HandleFunc(route.path, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", allow)
			writeReply(w, errReply(queen.ErrMethodNotAllowed.With("%s %s: use %s", r.Method, r.URL.Path, allow)))
		})
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeReply(w, errReply(queen.ErrNotFound.With("no route %s %s", r.Method, r.URL.Path)))
	})
	return mux
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
