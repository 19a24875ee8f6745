// Package pgtest gives tests a PostgreSQL server and fresh, empty databases
// on it.
//
// Use it from a package's TestMain:
//
//	func TestMain(m *testing.M) {
//		pgtest.SetTemplate(migrate) // optional
//		pgtest.Main(m)
//	}
//
// and in tests:
//
//	url := pgtest.NewDatabase(t)
//
// With DATABASE_URL set, that server is used (it must allow CREATE
// DATABASE). Otherwise Main starts a throwaway localpg cluster in a fresh
// temporary folder and removes it after the tests. Clusters left behind by
// a test binary that was killed (for example by a -timeout panic) are
// stopped and removed by the next Main.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queen-mq/queen-go/persistence/localpg"
)

var (
	serverURL string

	templateMu   sync.Mutex
	templateFn   func(ctx context.Context, url string) error
	templateOnce sync.Once
	templateName string
	templateErr  error
)

// tempPrefix names the temporary folders of throwaway clusters.
const tempPrefix = "queen-pgtest-"

// Main is called from a package's TestMain:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
// If DATABASE_URL is set it uses that server; otherwise it starts a
// throwaway localpg cluster in a fresh temp folder (reachable by the
// postgres user when root) and removes it after m.Run. Exits with m.Run's
// code.
func Main(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if u := os.Getenv("DATABASE_URL"); u != "" {
		serverURL = u
		defer dropTemplate()
		return m.Run()
	}

	reapAbandoned()
	dir, err := os.MkdirTemp("", tempPrefix)
	if err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
		return 1
	}
	defer os.RemoveAll(dir)
	// 0755 so that the postgres OS user can reach the cluster when the
	// tests run as root (os.MkdirTemp makes 0700 folders).
	if err := os.Chmod(dir, 0o755); err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
		return 1
	}
	_ = os.WriteFile(filepath.Join(dir, "owner.pid"), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	cluster, err := localpg.Start(ctx, localpg.Config{DataDir: filepath.Join(dir, "data"), Logger: logger})
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: start a local PostgreSQL (set DATABASE_URL to use a running server instead): %v\n", err)
		return 1
	}
	defer func() {
		if err := cluster.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
		}
		if !strings.HasPrefix(cluster.Dir(), dir+string(filepath.Separator)) {
			os.RemoveAll(cluster.Dir())
		}
	}()
	u, err := url.Parse(cluster.URL())
	if err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
		return 1
	}
	u.Path = "/postgres"
	serverURL = u.String()
	return m.Run()
}

// ServerURL returns the admin URL of the server (for tests that need it).
// It is empty before Main runs.
func ServerURL() string { return serverURL }

// SetTemplate registers fn to prepare a template database (for example by
// running migrations). It is called once, lazily, on the first
// NewDatabase, with the URL of the new template database; every database
// NewDatabase creates afterwards is a copy of it. fn must close its
// connections before returning (leftovers are terminated). Call it before
// the first NewDatabase, typically in TestMain before Main.
func SetTemplate(fn func(ctx context.Context, url string) error) {
	templateMu.Lock()
	defer templateMu.Unlock()
	templateFn = fn
}

// NewDatabase creates a fresh, empty database (CREATE DATABASE
// queen_test_<random>) on that server, registers t.Cleanup to drop it
// (WITH (FORCE)), and returns its URL. Safe for t.Parallel().
func NewDatabase(t testing.TB) string {
	t.Helper()
	if serverURL == "" {
		t.Fatal("pgtest: no server: call pgtest.Main(m) from TestMain")
	}
	tmpl, err := preparedTemplate()
	if err != nil {
		t.Fatalf("pgtest: prepare template database: %v", err)
	}
	return newDatabase(t, tmpl)
}

// newDatabase creates a database copied from tmpl ("" = the server's
// default template).
func newDatabase(t testing.TB, tmpl string) string {
	t.Helper()
	name := "queen_test_" + randomHex(8)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := createDatabase(ctx, name, tmpl); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := adminExec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("pgtest: drop database %s: %v", name, err)
		}
	})
	u, err := databaseURL(serverURL, name)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return u
}

func createDatabase(ctx context.Context, name, tmpl string) error {
	sql := "CREATE DATABASE " + pgx.Identifier{name}.Sanitize()
	if tmpl != "" {
		sql += " TEMPLATE " + pgx.Identifier{tmpl}.Sanitize()
	}
	if err := adminExec(ctx, sql); err != nil {
		return fmt.Errorf("create database %s: %w", name, err)
	}
	return nil
}

// preparedTemplate builds the template database once, if SetTemplate was
// called, and returns its name ("" without a template).
func preparedTemplate() (string, error) {
	templateMu.Lock()
	fn := templateFn
	templateMu.Unlock()
	if fn == nil {
		return "", nil
	}
	templateOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		name := "queen_tmpl_" + randomHex(8)
		if err := createDatabase(ctx, name, ""); err != nil {
			templateErr = err
			return
		}
		templateName = name // dropped by Main even if preparing fails
		u, err := databaseURL(serverURL, name)
		if err != nil {
			templateErr = err
			return
		}
		if err := fn(ctx, u); err != nil {
			templateErr = fmt.Errorf("template function: %w", err)
			return
		}
		// Copying needs the template to have no sessions: end stray
		// ones and refuse new connections from now on.
		lit := "'" + strings.ReplaceAll(name, "'", "''") + "'"
		ident := pgx.Identifier{name}.Sanitize()
		templateErr = adminExec(ctx,
			"ALTER DATABASE "+ident+" WITH ALLOW_CONNECTIONS false IS_TEMPLATE true",
			"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = "+lit+" AND pid <> pg_backend_pid()",
		)
	})
	return templateName, templateErr
}

// dropTemplate removes the template database from a shared server.
func dropTemplate() {
	if templateName == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ident := pgx.Identifier{templateName}.Sanitize()
	if err := adminExec(ctx,
		"ALTER DATABASE "+ident+" WITH IS_TEMPLATE false",
		"DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)",
	); err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: drop template database %s: %v\n", templateName, err)
	}
}

// adminExec runs statements, in order, on a new connection to the server.
func adminExec(ctx context.Context, sqls ...string) error {
	conn, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	for _, sql := range sqls {
		if _, err := conn.Exec(ctx, sql); err != nil {
			return fmt.Errorf("%s: %w", sql, err)
		}
	}
	return nil
}

// databaseURL returns connString (a URL or a key=value connection string)
// pointing at database name instead.
func databaseURL(connString, name string) (string, error) {
	if strings.HasPrefix(connString, "postgres://") || strings.HasPrefix(connString, "postgresql://") {
		u, err := url.Parse(connString)
		if err != nil {
			return "", fmt.Errorf("parse server URL: %w", err)
		}
		u.Path = "/" + name
		u.RawPath = ""
		return u.String(), nil
	}
	// key=value form: a later dbname wins.
	return strings.TrimSpace(connString) + " dbname=" + name, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// reapAbandoned stops and removes throwaway clusters whose test binary
// died without cleaning up (os.Exit on a test timeout skips defers).
func reapAbandoned() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), tempPrefix+"*"))
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, "owner.pid"))
		if err != nil {
			continue
		}
		owner, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || owner <= 0 || alive(owner) {
			continue
		}
		pgdata := clusterData(dir)
		if pgdata != "" {
			stopPostmaster(pgdata)
		}
		os.RemoveAll(dir)
	}
}

// clusterData finds the data folder of the cluster of a throwaway folder.
func clusterData(dir string) string {
	area := filepath.Join(dir, "data", "postgres")
	if b, err := os.ReadFile(filepath.Join(dir, "data", "postgres.dir")); err == nil {
		area = strings.TrimSpace(string(b))
	}
	if _, err := os.Stat(filepath.Join(area, "data")); err != nil {
		return ""
	}
	return filepath.Join(area, "data")
}

// stopPostmaster sends an immediate-shutdown signal to the postmaster of
// pgdata (checking that the pid really is a postgres working there) and
// waits for it to exit.
func stopPostmaster(pgdata string) {
	b, err := os.ReadFile(filepath.Join(pgdata, "postmaster.pid"))
	if err != nil {
		return
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil || pid <= 0 {
		return
	}
	cwd, err1 := os.Stat(fmt.Sprintf("/proc/%d/cwd", pid))
	data, err2 := os.Stat(pgdata)
	if err1 != nil || err2 != nil || !os.SameFile(cwd, data) {
		return
	}
	if err := syscall.Kill(pid, syscall.SIGQUIT); err != nil {
		return
	}
	deadline := time.Now().Add(30 * time.Second)
	for alive(pid) && time.Now().Before(deadline) {
		<-time.After(20 * time.Millisecond)
	}
}

// alive reports whether pid is a live, non-zombie process.
func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	if err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	if i := strings.LastIndexByte(string(stat), ')'); i >= 0 && i+2 < len(stat) {
		return stat[i+2] != 'Z'
	}
	return true
}
