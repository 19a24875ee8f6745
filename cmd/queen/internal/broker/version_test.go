package broker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"regexp"
	"runtime/debug"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/persistence"
	"github.com/queen-mq/queen-go/persistence/pgtest"
)

// TestRevisionOf: the build's vcs.revision, "+dirty" with vcs.modified,
// "unknown" without one.
func TestRevisionOf(t *testing.T) {
	t.Parallel()
	set := func(kv ...string) []debug.BuildSetting {
		var out []debug.BuildSetting
		for i := 0; i < len(kv); i += 2 {
			out = append(out, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return out
	}
	require.Equal(t, "unknown", revisionOf(nil))
	require.Equal(t, "unknown", revisionOf(set("vcs.modified", "true")))
	require.Equal(t, "58a347c0", revisionOf(set("vcs", "git", "vcs.revision", "58a347c0", "vcs.modified", "false")))
	require.Equal(t, "58a347c0+dirty", revisionOf(set("vcs.revision", "58a347c0", "vcs.modified", "true")))
}

// logBuffer is a log destination safe for the broker's goroutines and the
// test reading it.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestBrokerAdvertisesItsBuild (SPEC.md §2): a broker alone (no cluster
// configured) registers in queen.brokers with its release, revision, schema
// version and layout generation, and its start log line, /health and the
// cluster view carry them.
func TestBrokerAdvertisesItsBuild(t *testing.T) {
	var logs logBuffer
	e := startEnv(t, func(c *Config) {
		c.Revision = "0123456789abcdef+dirty"
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	want := queen.Build{Release: Release, Revision: "0123456789abcdef+dirty", Schema: persistence.SchemaVersion(), Layout: persistence.LayoutGeneration()}
	eq(t, want, e.b.Build(), "Broker.Build")

	ctx := context.Background()
	var got queen.Build
	require.NoError(t, e.db.QueryRow(ctx, `SELECT release, revision, schema_version, layout FROM queen.brokers`).
		Scan(&got.Release, &got.Revision, &got.Schema, &got.Layout))
	eq(t, want, got, "queen.brokers row")

	require.Contains(t, logs.String(), `msg="broker ready"`)
	require.Regexp(t, `msg="broker ready".* release=`+regexp.QuoteMeta(Release)+` revision=0123456789abcdef\+dirty schema=\d+ layout=\d+`, logs.String())

	get := func(path string, v any) {
		t.Helper()
		resp, err := e.hc.Get(e.base + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		eq(t, http.StatusOK, resp.StatusCode, "%s status", path)
		require.NoError(t, json.NewDecoder(resp.Body).Decode(v))
	}
	var health struct {
		Status string `json:"status"`
		queen.Build
	}
	get("/health", &health)
	eq(t, "healthy", health.Status, "/health status")
	eq(t, want, health.Build, "/health build")

	var cv queen.ClusterView
	get("/api/v1/cluster", &cv)
	require.Len(t, cv.Brokers, 1)
	eq(t, want, cv.Brokers[0].Build, "cluster view build")
}

// TestBrokerRefusesANewerSchema (SPEC.md §2): a broker does not start on a
// schema holding a migration it does not know; the error names both
// versions and nothing registers.
func TestBrokerRefusesANewerSchema(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := pgtest.NewDatabase(t)
	_, err := persistence.Migrate(ctx, url)
	require.NoError(t, err)
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, `INSERT INTO queen.schema_migrations (version, name) VALUES (9999, 'from_the_future')`)
	require.NoError(t, err)

	b, err := Start(ctx, Config{DatabaseURL: url, HTTPAddr: "127.0.0.1:0", NATSListen: "127.0.0.1:0", DataDir: t.TempDir(), Logger: quietLogger()})
	if err == nil {
		b.Stop(context.Background()) //nolint:errcheck
		t.Fatal("a broker started on a schema newer than it knows")
	}
	var tooNew *persistence.SchemaTooNewError
	require.True(t, errors.As(err, &tooNew), "%v", err)
	eq(t, 9999, tooNew.Database, "the database's version")
	eq(t, persistence.SchemaVersion(), tooNew.Binary, "the binary's version")
	var n int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM queen.brokers`).Scan(&n))
	eq(t, 0, n, "brokers registered")
}
