package transport

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	queen "github.com/queen-mq/queen-go"
)

// A closed Gate answers /health 503 {"status":"starting","phase":...} with
// the build, everything else 503 starting (retryable, Retry-After); once
// opened, every request reaches the broker's handler.
func TestGate(t *testing.T) {
	g := NewGate(queen.Build{Release: "9.9.9", Revision: "abc", Schema: 42, Layout: 1})
	serve := func(method, path string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		g.ServeHTTP(w, httptest.NewRequest(method, path, strings.NewReader(`{"items":[]}`)))
		return w
	}
	var h map[string]any
	w := serve("GET", "/health")
	require.Equal(t, http.StatusServiceUnavailable, w.Code)
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &h))
	require.Equal(t, map[string]any{"status": "starting", "phase": "starting", "release": "9.9.9", "revision": "abc", "schema": float64(42), "layout": float64(1)}, h)

	g.SetPhase("migrating")
	w = serve("GET", "/health")
	require.Equal(t, http.StatusServiceUnavailable, w.Code)
	require.Equal(t, "1", w.Header().Get("Retry-After"))
	require.Equal(t, "application/json", w.Header().Get("Content-Type"))
	require.Contains(t, w.Body.String(), `"status":"starting","phase":"migrating"`)

	for _, r := range [][2]string{{"POST", "/api/v1/push"}, {"GET", "/api/v1/pop/queue/q"}, {"GET", "/metrics"}, {"POST", "/health"}} {
		w := serve(r[0], r[1])
		require.Equal(t, http.StatusServiceUnavailable, w.Code, "%v", r)
		require.Equal(t, "1", w.Header().Get("Retry-After"), "%v", r)
		var e queen.Error
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &e), "%v", r)
		require.Equal(t, queen.ErrStarting.Code, e.Code, "%v", r)
		require.True(t, e.Retryable, "%v", r)
		require.Contains(t, e.Message, "(migrating)", "%v", r)
	}

	g.Open(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusTeapot)
	}))
	require.Equal(t, http.StatusTeapot, serve("GET", "/health").Code)
	require.Equal(t, http.StatusTeapot, serve("POST", "/api/v1/push").Code)
}
