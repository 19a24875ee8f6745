package transport

import (
	"net/http"
	"sync/atomic"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/transport/wire"
)

// Gate is the HTTP handler of a broker's listener from the moment the port
// is taken, before the broker can serve: while it starts (NATS, PostgreSQL,
// the migrations, which may wait minutes on another broker's migration
// lock, the actors, the shards), GET /health answers 503
// {"status":"starting","phase":"<phase>","release",...} (startingReply) and
// every other request 503 starting (retryable, Retry-After: 1), so a load
// balancer or an orchestrator sees a live process that is not ready yet
// instead of a connection that hangs. Open hands every request from then on
// to the broker's own handler (Service.Handler). Safe for concurrent use.
type Gate struct {
	build queen.Build
	phase atomic.Pointer[string]
	open  atomic.Pointer[http.Handler]
}

// NewGate returns a closed Gate that reports build (the broker's release,
// revision, schema and layout, as /health does) and the phase "starting".
func NewGate(build queen.Build) *Gate {
	g := &Gate{build: build}
	g.SetPhase("starting")
	return g
}

// SetPhase names what the start does now, reported by /health while the
// gate is closed: the broker uses "nats", "postgres", "migrating",
// "opening", "actors", "shards" and "front-doors" (README, HTTP API).
func (g *Gate) SetPhase(phase string) { g.phase.Store(&phase) }

// Phase is the phase SetPhase set last.
func (g *Gate) Phase() string { return *g.phase.Load() }

// Open serves every request from now on with h. It is called once, when
// the broker is ready; a second call replaces h.
func (g *Gate) Open(h http.Handler) { g.open.Store(&h) }

// ServeHTTP passes r to the handler Open gave, or answers it as a starting
// broker (Gate).
func (g *Gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h := g.open.Load(); h != nil {
		(*h).ServeHTTP(w, r)
		return
	}
	w.Header().Set("Retry-After", "1")
	if r.URL.Path == "/health" && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
		writeReply(w, reply{status: http.StatusServiceUnavailable, body: wire.StartingReply{Status: "starting", Phase: g.Phase(), Build: g.build}})
		return
	}
	writeReply(w, errReply(queen.ErrStarting.With("the broker is starting (%s); retry shortly with the same transaction ids", g.Phase())))
}
