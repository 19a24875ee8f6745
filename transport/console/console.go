// Package console is the broker's web console: plain HTML, CSS and
// JavaScript embedded in the binary (no build step), served by the HTTP
// gateway under /ui/ (GET / redirects there).
//
// The page is a one-page app with hash routes — #/overview, #/queues,
// #/queues/{queue}, #/dedup, #/dlq, #/cluster, #/access — that calls the
// broker's JSON routes from the browser: GET /api/v1/stats (rates, commit p50 and p99,
// RSS, dedup-cache bytes; polled every 1.5 s on every page, its replies of
// the last 10 minutes kept in the tab for the overview's timeline charts),
// /api/v1/resources/queues[/{queue}] (with
// each queue's duplicate rate), /api/v1/queues/{queue} (a queue page's
// partitions and consumer groups with cursor and lag, polled every 2 s) and
// /api/v1/queues/{queue}/messages (its recent messages, a read-only peek),
// /api/v1/dlq, /api/v1/dedup and POST /api/v1/dlq/replay (SPEC.md §13),
// /api/v1/cluster, and GET /api/v1/auth/whoami (sign-in; #/access shows its
// answer).
//
// The files hold no data: they are served without a token. The page first
// asks GET /api/v1/auth/whoami. When the broker answers 401 (JWT_ENABLED, or
// QUEEN_ADMIN_TOKEN set) it shows a sign-in that takes a pasted JWT or the
// admin token (a leading "Bearer " is dropped), keeps it in the tab's
// sessionStorage and sends it as "Authorization: Bearer <token>" on every
// call. Signed in, the header shows the broker's answer — the token's sub, its
// role (read-only, read-write or admin; the admin token and an open broker
// are admin) and its expiry — and the controls the role may not use (the DLQ's
// list and replay, the dedup inspector, a queue's dead letters: admin) are
// disabled with the reason beside them instead of being sent to answer 403.
// Any 401 (an expired token, a bad signature, ...) shows the broker's error
// message and returns to the sign-in.
package console

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed static
var files embed.FS

// Handler serves the console's files under prefix (e.g. "/ui/"); prefix
// itself serves index.html. Unknown files answer 404.
func Handler(prefix string) http.Handler {
	sub, err := fs.Sub(files, "static")
	if err != nil {
		panic(err) // the embedded tree always has static/
	}
	fsrv := http.StripPrefix(prefix, http.FileServerFS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'")
		fsrv.ServeHTTP(w, r)
	})
}
