package main

import (
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
)

// startProfiling serves Go's runtime profiles (net/http/pprof: /debug/pprof/
// heap, profile, goroutine, ...) on QUEEN_PPROF_ADDR (host:port) when it is
// set; unset (the default) serves nothing. It covers every verb of this
// process, so with `queen loadtest --embedded` it profiles broker and harness
// together. The listener is separate from the HTTP gateway and not guarded by
// QUEEN_ADMIN_TOKEN: bind it to loopback. A listen error is logged, never
// fatal.
func startProfiling() {
	addr := os.Getenv("QUEEN_PPROF_ADDR")
	if addr == "" {
		return
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		slog.Warn("profiling listener not started", "addr", addr, "err", err)
		return
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	slog.Info("profiling listener", "addr", ln.Addr().String())
	go func() { _ = http.Serve(ln, mux) }()
}
