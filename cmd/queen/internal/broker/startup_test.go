package broker

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/queen-mq/queen-go/persistence/pgtest"
)

// TestNATSReadyWhenStartReturns: Start "returns once it serves HTTP and
// NATS", so the very first request after it returns is answered (no "no
// responders"). Brokers are started one after another on one database and
// one external NATS server, and a client that is already connected pushes
// the moment Start returns.
func TestNATSReadyWhenStartReturns(t *testing.T) {
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true, NoSigs: true, MaxPayload: 16<<20 + 64<<10})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("NATS server not ready")
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	url := pgtest.NewDatabase(t)

	const starts = 15
	noResponders := 0
	for i := 0; i < starts; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		b, err := Start(ctx, Config{DatabaseURL: url, HTTPAddr: "127.0.0.1:0", NATSURL: srv.ClientURL(), DataDir: t.TempDir(), Logger: quietLogger()})
		cancel()
		if err != nil {
			t.Fatalf("start %d: %v", i, err)
		}
		e := &env{b: b, nc: nc, hc: &http.Client{}, base: b.HTTPURL()}
		for _, via := range []string{"nats", "http"} {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			r, err := e.tryPush(ctx, via, items(it("ready", "", "")))
			cancel()
			switch {
			case errors.Is(err, nats.ErrNoResponders):
				noResponders++
				t.Errorf("start %d: the first %s push right after Start got %v", i, via, err)
			case err != nil:
				t.Errorf("start %d: first %s push: %v", i, via, err)
			case r.Status != http.StatusCreated:
				t.Errorf("start %d: first %s push: status %d %s", i, via, r.Status, clip(r.Raw))
			}
		}
		e.hc.CloseIdleConnections()
		ctx, cancel = context.WithTimeout(context.Background(), 30*time.Second)
		if err := b.Stop(ctx); err != nil {
			t.Errorf("stop %d: %v", i, err)
		}
		cancel()
	}
	if noResponders > 0 {
		t.Logf("%d of %d first NATS pushes found no responders", noResponders, starts)
	}
}

// TestHealthWhileWaitingOnTheMigrationLock (issue 38): a broker whose start
// waits on the migration lock (another session holds it, as a broker
// migrating does) already answers on its HTTP port: /health 503
// {"status":"starting","phase":"migrating"} with its build, any other route
// 503 starting (retryable, Retry-After), and once the lock is released and
// Start returns, the real handler: /health 200 healthy and pushes stored.
func TestHealthWhileWaitingOnTheMigrationLock(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	ctx := context.Background()
	holder, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer holder.Close(ctx)
	// persistence's migrate_lock.sql: the session advisory lock MigrateWith takes.
	_, err = holder.Exec(ctx, `SELECT pg_advisory_lock(7307011042981447)`)
	require.NoError(t, err)

	// A free port: the broker's address must be known before Start returns.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	type started struct {
		b   *Broker
		err error
	}
	done := make(chan started, 1)
	go func() {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		b, err := Start(sctx, Config{DatabaseURL: url, HTTPAddr: addr, NATSListen: "127.0.0.1:0", DataDir: t.TempDir(), Logger: quietLogger()})
		done <- started{b, err}
	}()
	hc := &http.Client{Timeout: 5 * time.Second}
	get := func(method, path, body string) (int, http.Header, []byte, error) {
		req, err := http.NewRequest(method, "http://"+addr+path, strings.NewReader(body))
		if err != nil {
			return 0, nil, nil, err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return 0, nil, nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, b, err
	}

	// Poll until the broker listens and waits on the lock.
	var health struct {
		Status, Phase, Release string
		Schema                 *int
	}
	deadline := time.Now().Add(time.Minute)
	for {
		require.True(t, time.Now().Before(deadline), "no /health answering starting/migrating within a minute (last %+v)", health)
		status, hdr, body, err := get("GET", "/health", "")
		if err == nil { // else not listening yet
			require.Equal(t, http.StatusServiceUnavailable, status, "%s", body)
			require.Equal(t, "application/json", hdr.Get("Content-Type"))
			require.Equal(t, "1", hdr.Get("Retry-After"))
			require.NoError(t, json.Unmarshal(body, &health), "%s", body)
			require.Equal(t, "starting", health.Status, "%s", body)
			if health.Phase == "migrating" {
				break
			}
		}
		select { // poll again, bounded by deadline
		case s := <-done:
			t.Fatalf("Start returned while the migration lock was held: %v", s.err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	require.Equal(t, Release, health.Release)
	require.NotNil(t, health.Schema, "the build is reported while starting")

	// Everything else: 503 starting, retryable; nothing is written.
	status, hdr, body, err := get("POST", "/api/v1/push", `{"items":[{"queue":"gate","transactionId":"g1"}]}`)
	require.NoError(t, err)
	require.Equal(t, http.StatusServiceUnavailable, status, "%s", body)
	require.Equal(t, "1", hdr.Get("Retry-After"))
	var e struct {
		Code      string `json:"code"`
		Retryable bool   `json:"retryable"`
	}
	require.NoError(t, json.Unmarshal(body, &e), "%s", body)
	require.Equal(t, "starting", e.Code)
	require.True(t, e.Retryable)

	_, err = holder.Exec(ctx, `SELECT pg_advisory_unlock(7307011042981447)`)
	require.NoError(t, err)
	var s started
	select {
	case s = <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("Start did not return once the migration lock was released")
	}
	require.NoError(t, s.err)
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := s.b.Stop(sctx); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	status, _, body, err = get("GET", "/health", "")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, status, "%s", body)
	require.Contains(t, string(body), `"status":"healthy"`)
	status, _, body, err = get("POST", "/api/v1/push", `{"items":[{"queue":"gate","transactionId":"g1"}]}`)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, status, "%s", body)
	require.Contains(t, string(body), `"queued"`)
	hc.CloseIdleConnections()
}
