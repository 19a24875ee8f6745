// Package console is the broker's web console: plain HTML, CSS and
// JavaScript embedded in the binary (no build step), served by the HTTP
// gateway under /ui/ (GET / redirects there).
//
// The page is a one-page app with hash routes — #/overview, #/queues,
// #/queues/{queue}, #/dedup, #/dlq, #/cluster — that calls the broker's JSON
// routes from the browser: GET /api/v1/stats (rates, commit p50 and p99,
// RSS, dedup-cache bytes; polled every 1.5 s on every page, its replies of
// the last 10 minutes kept in the tab for the overview's timeline charts),
// /api/v1/resources/queues[/{queue}] (with
// each queue's duplicate rate), /api/v1/queues/{queue} (a queue page's
// partitions and consumer groups with cursor and lag, polled every 2 s) and
// /api/v1/queues/{queue}/messages (its recent messages, a read-only peek),
// /api/v1/dlq, /api/v1/dedup and POST /api/v1/dlq/replay (SPEC.md §13),
// /api/v1/cluster. The files hold no data: they are served without the admin
// token; with QUEEN_ADMIN_TOKEN set, the page asks for the token, keeps it in
// the tab's sessionStorage and sends it as "Authorization: Bearer <token>" on
// every call.
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
