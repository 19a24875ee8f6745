package localpg

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// requireBinaries skips when no PostgreSQL binaries are installed.
func requireBinaries(t *testing.T) {
	t.Helper()
	if _, err := FindBinDir(""); err != nil {
		t.Skipf("no PostgreSQL binaries: %v", err)
	}
}

// reachableDir returns a fresh 0755 folder under the temp folder, which the
// postgres OS user can traverse when the test runs as root.
func reachableDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "localpg-test-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "data")
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// start starts the cluster for dataDir and registers its cleanup: stop,
// then remove a /var/lib/queen-pg area the test made.
func start(t *testing.T, dataDir string) *Cluster {
	t.Helper()
	return startLogged(t, dataDir, testLogger(t))
}

func startLogged(t *testing.T, dataDir string, logger *slog.Logger) *Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	began := time.Now()
	c, err := Start(ctx, Config{DataDir: dataDir, Logger: logger})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Logf("Start took %v (port %d, dir %s)", time.Since(began).Round(time.Millisecond), c.Port(), c.Dir())
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("Stop: %v", err)
		}
		if strings.HasPrefix(c.Dir(), rootBase+"/") {
			os.RemoveAll(c.Dir())
			os.RemoveAll(filepath.Join(c.Dir(), "data.initdb"))
		}
	})
	return c
}

func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func exec1(t *testing.T, url, sql string) {
	t.Helper()
	conn := connect(t, url)
	if _, err := conn.Exec(context.Background(), sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	conn.Close(context.Background())
}

func queryString(t *testing.T, url, sql string) string {
	t.Helper()
	conn := connect(t, url)
	var s string
	if err := conn.QueryRow(context.Background(), sql).Scan(&s); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	conn.Close(context.Background())
	return s
}

// waitGone polls until pid no longer names a live process.
func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for processAlive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d still alive", pid)
		}
		pollPause()
	}
}

// pollPause yields briefly while polling (no fixed sleeps).
func pollPause() { <-time.After(20 * time.Millisecond) }

func postmasterPid(t *testing.T, c *Cluster) int {
	t.Helper()
	pf, ok := readPidFile(c.pgdata)
	if !ok {
		t.Fatalf("no postmaster.pid in %s", c.pgdata)
	}
	return pf.pid
}

func TestStartFresh(t *testing.T) {
	requireBinaries(t)
	t.Parallel()
	dataDir := t.TempDir() // 0700: as root, unreachable for postgres
	c := start(t, dataDir)

	if os.Geteuid() == 0 {
		if !strings.HasPrefix(c.Dir(), rootBase+"/") {
			t.Errorf("as root with a 0700 DataDir the cluster should live under %s, got %s", rootBase, c.Dir())
		}
		b, err := os.ReadFile(filepath.Join(dataDir, dirPointerName))
		if err != nil || strings.TrimSpace(string(b)) != c.Dir() {
			t.Errorf("pointer file: %q, %v; want %s", b, err, c.Dir())
		}
		assertOwnedByPostgres(t, c.Dir())
	} else if c.Dir() != filepath.Join(dataDir, "postgres") {
		t.Errorf("cluster dir %s, want %s", c.Dir(), filepath.Join(dataDir, "postgres"))
	}

	wantPrefix := "postgres://postgres@127.0.0.1:" + strconv.Itoa(c.Port()) + "/queen?sslmode=disable"
	if c.URL() != wantPrefix {
		t.Errorf("URL %q, want %q", c.URL(), wantPrefix)
	}
	b, err := os.ReadFile(filepath.Join(dataDir, urlFileName))
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != c.URL()+"\n" {
		t.Errorf("URL file %q, want %q", b, c.URL()+"\n")
	}
	if fi, _ := os.Stat(filepath.Join(dataDir, urlFileName)); fi.Mode().Perm() != 0o644 {
		t.Errorf("URL file mode %v", fi.Mode().Perm())
	}

	if got := queryString(t, c.URL(), "SELECT (1)::text"); got != "1" {
		t.Errorf("SELECT 1 = %q", got)
	}
	for setting, want := range map[string]string{
		"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on",
		"listen_addresses": "127.0.0.1", "max_connections": "200",
		"server_encoding": "UTF8", "current_database()": "queen",
	} {
		sql := "SHOW " + setting
		if strings.HasSuffix(setting, ")") {
			sql = "SELECT " + setting
		}
		if got := queryString(t, c.URL(), sql); got != want {
			t.Errorf("%s = %q, want %q", setting, got, want)
		}
	}
	if got := queryString(t, c.URL(), "SHOW unix_socket_directories"); got != c.sockDir {
		t.Errorf("unix_socket_directories = %q, want %q", got, c.sockDir)
	}
	if _, err := os.Stat(c.logPath); err != nil {
		t.Errorf("log file: %v", err)
	}

	// Stop is idempotent and really stops the server.
	pid := postmasterPid(t, c)
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := c.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if processAlive(pid) {
		t.Errorf("postmaster %d still alive after Stop", pid)
	}
}

func assertOwnedByPostgres(t *testing.T, path string) {
	t.Helper()
	owner, err := currentOwner()
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if int(st.Uid) != owner.uid || fi.Mode().Perm() != 0o700 {
		t.Errorf("%s: uid %d mode %v, want uid %d mode 0700", path, st.Uid, fi.Mode().Perm(), owner.uid)
	}
}

func TestRestartKeepsDataAndPort(t *testing.T) {
	requireBinaries(t)
	t.Parallel()
	dataDir := reachableDir(t)

	c1 := start(t, dataDir)
	if c1.Dir() != filepath.Join(dataDir, "postgres") {
		t.Errorf("reachable DataDir: cluster dir %s, want %s", c1.Dir(), filepath.Join(dataDir, "postgres"))
	}
	if os.Geteuid() == 0 {
		assertOwnedByPostgres(t, c1.Dir())
		if _, err := os.Stat(filepath.Join(dataDir, dirPointerName)); err == nil {
			t.Errorf("no pointer file expected for a reachable DataDir")
		}
	}
	exec1(t, c1.URL(), "CREATE TABLE kept (v text); INSERT INTO kept VALUES ('run 1')")
	sysID := queryString(t, c1.URL(), "SELECT system_identifier::text FROM pg_control_system()")
	port1 := c1.Port()
	if err := c1.Stop(); err != nil {
		t.Fatal(err)
	}

	// Second run: same cluster (same system identifier: no new initdb),
	// same port, same data.
	c2 := start(t, dataDir)
	if c2.Port() != port1 || c2.URL() != c1.URL() {
		t.Errorf("port changed without reason: %d -> %d", port1, c2.Port())
	}
	if got := queryString(t, c2.URL(), "SELECT system_identifier::text FROM pg_control_system()"); got != sysID {
		t.Errorf("system identifier %s, want %s (re-initdb?)", got, sysID)
	}
	if got := queryString(t, c2.URL(), "SELECT v FROM kept"); got != "run 1" {
		t.Errorf("kept = %q", got)
	}
	if err := c2.Stop(); err != nil {
		t.Fatal(err)
	}

	// Third run with the port taken by something else: a new port,
	// written to queen.conf and the URL file.
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port1)))
	if err != nil {
		t.Fatalf("occupy port %d: %v", port1, err)
	}
	defer l.Close()
	c3 := start(t, dataDir)
	if c3.Port() == port1 {
		t.Fatalf("port %d is taken but was kept", port1)
	}
	if got := c3.readConf().port; got != c3.Port() {
		t.Errorf("queen.conf port %d, want %d", got, c3.Port())
	}
	if b, _ := os.ReadFile(filepath.Join(dataDir, urlFileName)); string(b) != c3.URL()+"\n" {
		t.Errorf("URL file %q, want %q", b, c3.URL())
	}
	if got := queryString(t, c3.URL(), "SELECT v FROM kept"); got != "run 1" {
		t.Errorf("kept = %q", got)
	}
	if got := queryString(t, c3.URL(), "SELECT system_identifier::text FROM pg_control_system()"); got != sysID {
		t.Errorf("system identifier %s, want %s (re-initdb?)", got, sysID)
	}
	if err := c3.Stop(); err != nil {
		t.Fatal(err)
	}

	// A server that cannot start: the error carries the log tail and
	// nothing is left running.
	auto := filepath.Join(c3.pgdata, "postgresql.auto.conf")
	orig, err := os.ReadFile(auto)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(auto, append(append([]byte{}, orig...), "max_connections = 'lots'\n"...), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Start(context.Background(), Config{DataDir: dataDir, Logger: testLogger(t)})
	if err == nil {
		t.Fatal("Start succeeded with a broken setting")
	}
	if !strings.Contains(err.Error(), "postgresql.log (tail)") || !strings.Contains(err.Error(), `invalid value for parameter "max_connections"`) {
		t.Errorf("error lacks the log tail: %v", err)
	}
	if _, ok := readPidFile(c3.pgdata); ok {
		t.Errorf("postmaster.pid left after a failed start")
	}
	if err := os.WriteFile(auto, orig, 0o600); err != nil {
		t.Fatal(err)
	}
}

// A DataDir so deep that the Unix socket path would not fit: TCP only.
func TestLongPath(t *testing.T) {
	requireBinaries(t)
	t.Parallel()
	dataDir := filepath.Join(reachableDir(t), strings.Repeat("d", 80))
	c := start(t, dataDir)
	if got := queryString(t, c.URL(), "SELECT (1)::text"); got != "1" {
		t.Errorf("SELECT 1 = %q", got)
	}
	if got := queryString(t, c.URL(), "SHOW unix_socket_directories"); got != "" {
		t.Errorf("unix_socket_directories = %q, want empty", got)
	}
}

// A broker SIGKILLed leaves its postmaster running: the next Start adopts it.
func TestAdoptLeftoverPostmaster(t *testing.T) {
	requireBinaries(t)
	t.Parallel()
	dataDir := reachableDir(t)

	c1 := start(t, dataDir)
	exec1(t, c1.URL(), "CREATE TABLE kept (v text); INSERT INTO kept VALUES ('before')")
	pid := postmasterPid(t, c1)

	// While c1's process holds the data folder, nobody else may take it:
	// a second broker must not adopt (and later stop) a live broker's server.
	if _, err := Start(context.Background(), Config{DataDir: dataDir}); !errors.Is(err, ErrInUse) {
		t.Fatalf("second Start while the first runs: %v, want ErrInUse", err)
	}

	// "Forget" c1, as a killed broker would: its process exits, the kernel
	// drops its lock, its postmaster keeps running.
	c1.lock.Close()

	c2 := start(t, dataDir)
	if got := postmasterPid(t, c2); got != pid {
		t.Errorf("postmaster pid %d, want the adopted %d", got, pid)
	}
	if c2.URL() != c1.URL() {
		t.Errorf("URL %s, want %s", c2.URL(), c1.URL())
	}
	if got := queryString(t, c2.URL(), "SELECT v FROM kept"); got != "before" {
		t.Errorf("kept = %q", got)
	}
	if err := c2.Stop(); err != nil {
		t.Fatal(err)
	}
	waitGone(t, pid)
}

// The postmaster itself SIGKILLed: the next Start runs crash recovery and
// committed data survives.
func TestRecoverAfterPostmasterKill(t *testing.T) {
	requireBinaries(t)
	t.Parallel()
	dataDir := reachableDir(t)

	c1 := start(t, dataDir)
	exec1(t, c1.URL(), "CREATE TABLE kept (v text); INSERT INTO kept VALUES ('committed')")
	killPostmaster(t, c1)

	c2 := start(t, dataDir)
	if got := queryString(t, c2.URL(), "SELECT v FROM kept"); got != "committed" {
		t.Errorf("kept = %q", got)
	}
	log, _ := os.ReadFile(c2.logPath)
	if !strings.Contains(string(log), "automatic recovery in progress") {
		t.Errorf("no crash recovery in the log:\n%s", tailFile(c2.logPath, 0, 30))
	}
}

// killPostmaster SIGKILLs the postmaster and waits until it and its
// children are gone.
func killPostmaster(t *testing.T, c *Cluster) {
	t.Helper()
	c.lock.Close() // its broker died with it
	pid := postmasterPid(t, c)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitGone(t, pid)
	if _, ok := readPidFile(c.pgdata); !ok {
		t.Fatal("postmaster.pid vanished after SIGKILL")
	}
}

// After a postmaster SIGKILL the pid in postmaster.pid may be gone (the
// ordinary case, which PostgreSQL handles itself) or reused by an unrelated
// process, even one of the cluster owner: Start recovers in every case and
// leaves the unrelated process alone.
func TestStalePostmasterPid(t *testing.T) {
	requireBinaries(t)
	t.Parallel()
	dataDir := reachableDir(t)

	c := start(t, dataDir)
	exec1(t, c.URL(), "CREATE TABLE kept (v int)")

	// An unrelated live process of the cluster owner.
	sleeper := exec.Command("sleep", "300")
	if c.owner.cred != nil {
		sleeper.SysProcAttr = &syscall.SysProcAttr{Credential: c.owner.cred}
	}
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sleeper.Process.Kill(); _ = sleeper.Wait() }) // best effort: the sleeper is killed, Wait only reaps it

	// A pid that is gone: a finished and reaped child.
	done := exec.Command("true")
	if err := done.Run(); err != nil {
		t.Fatal(err)
	}
	deadPid := done.Process.Pid

	cases := []struct {
		name       string
		pid        int
		weRemove   bool // localpg (not PostgreSQL) must clear the lock
		socketLock bool // also fake the socket lock file
	}{
		{"dead pid", deadPid, false, true},
		{"pid reused by a process of the cluster owner", sleeper.Process.Pid, true, false},
		{"pid reused by another user's process", os.Getpid(), true, false},
	}
	for i, tc := range cases {
		exec1(t, c.URL(), "INSERT INTO kept VALUES ("+strconv.Itoa(i)+")")
		killPostmaster(t, c)
		rewritePid(t, filepath.Join(c.pgdata, "postmaster.pid"), tc.pid)
		if tc.socketLock {
			rewritePid(t, filepath.Join(c.sockDir, ".s.PGSQL."+strconv.Itoa(c.Port())+".lock"), tc.pid)
		}

		var buf strings.Builder
		c = startLogged(t, dataDir, slog.New(slog.NewTextHandler(io.MultiWriter(t.Output(), &buf), nil)))
		if got := queryString(t, c.URL(), "SELECT count(*)::text FROM kept"); got != strconv.Itoa(i+1) {
			t.Errorf("%s: %s rows, want %d", tc.name, got, i+1)
		}
		if removed := strings.Contains(buf.String(), "removing stale postmaster.pid"); removed != tc.weRemove {
			t.Errorf("%s: localpg removed postmaster.pid: %v, want %v", tc.name, removed, tc.weRemove)
		}
	}
	if !processAlive(sleeper.Process.Pid) {
		t.Errorf("the unrelated process was harmed")
	}
}

// rewritePid replaces the pid on the first line of a PostgreSQL lock file.
func rewritePid(t *testing.T, path string, pid int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitN(string(b), "\n", 2)
	lines[0] = strconv.Itoa(pid)
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestMissingBinaries(t *testing.T) {
	empty := t.TempDir()
	t.Setenv("QUEEN_PG_BIN", empty)
	dataDir := reachableDir(t)

	began := time.Now()
	c, err := Start(context.Background(), Config{DataDir: dataDir, Logger: testLogger(t)})
	took := time.Since(began)
	if err == nil {
		_ = c.Stop() // cleanup only: the test fails on the next line
		t.Fatal("Start succeeded without binaries")
	}
	if !errors.Is(err, ErrNoBinaries) {
		t.Errorf("error %v does not wrap ErrNoBinaries", err)
	}
	want := "localpg: PostgreSQL binaries not found in " + empty + " (QUEEN_PG_BIN): need initdb, pg_ctl, postgres"
	if err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
	if took > 30*time.Second { // well below the 60 s a start waits for a server
		t.Errorf("took %v", took)
	}
	if _, err := os.Stat(filepath.Join(dataDir, "postgres")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("cluster folder created: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dataDir, dirPointerName)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pointer file created: %v", err)
	}

	// An explicit BinDir that is wrong does not fall back either, even
	// when QUEEN_PG_BIN is right.
	if real, err := func() (string, error) { t.Setenv("QUEEN_PG_BIN", ""); return FindBinDir("") }(); err == nil {
		t.Setenv("QUEEN_PG_BIN", real)
		_, err := Start(context.Background(), Config{DataDir: dataDir, BinDir: empty})
		if !errors.Is(err, ErrNoBinaries) || !strings.Contains(err.Error(), empty+" (BinDir)") {
			t.Errorf("explicit BinDir: %v", err)
		}
		if got, err := FindBinDir(""); err != nil || got != real {
			t.Errorf("FindBinDir with QUEEN_PG_BIN=%s: %q, %v", real, got, err)
		}
	}
}

// TestWALCompression: a new cluster gets wal_compression (lz4 when the
// server has it, else pglz) in queen.conf; an existing cluster whose
// queen.conf predates the setting gets it at its next start, without a
// restart of its own.
func TestWALCompression(t *testing.T) {
	requireBinaries(t)
	t.Parallel()
	dataDir := reachableDir(t)
	c1 := start(t, dataDir)
	want := queryString(t, c1.URL(), "SELECT CASE WHEN 'lz4' = ANY (enumvals) THEN 'lz4' ELSE 'pglz' END FROM pg_settings WHERE name = 'wal_compression'")
	if got := c1.readConf().walCompression; got != want {
		t.Fatalf("queen.conf wal_compression %q, want %q", got, want)
	}
	waitSetting(t, c1.URL(), "wal_compression", want)
	if err := c1.Stop(); err != nil {
		t.Fatal(err)
	}

	// A cluster set up before the setting existed: its queen.conf lacks it.
	conf := filepath.Join(c1.pgdata, confName)
	b, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "wal_compression") {
			kept = append(kept, line)
		}
	}
	if err := os.WriteFile(conf, []byte(strings.Join(kept, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	c2 := start(t, dataDir)
	if got := c2.readConf().walCompression; got != want {
		t.Fatalf("queen.conf wal_compression %q after a restart, want %q", got, want)
	}
	waitSetting(t, c2.URL(), "wal_compression", want)
	if err := c2.Stop(); err != nil {
		t.Fatal(err)
	}
}

// waitSetting polls until a new session sees setting name = want (a reload
// reaches the server's processes asynchronously).
func waitSetting(t *testing.T, url, name, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := queryString(t, url, "SELECT current_setting('"+name+"')")
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s = %q, want %q", name, got, want)
		}
		pollPause()
	}
}

// Restart: a fast stop and a start on the same folder and port. A session
// open across it is ended; new connections to the same URL work, the data
// is kept, the postmaster is a new one. After Stop, Restart fails.
func TestRestartInPlace(t *testing.T) {
	requireBinaries(t)
	t.Parallel()
	c := start(t, reachableDir(t))
	exec1(t, c.URL(), "CREATE TABLE kept (v text); INSERT INTO kept VALUES ('before')")
	old := connect(t, c.URL())
	pid, port, url := postmasterPid(t, c), c.Port(), c.URL()

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := c.Restart(ctx); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	if c.Port() != port || c.URL() != url {
		t.Errorf("Restart moved the server: port %d -> %d, URL %s -> %s", port, c.Port(), url, c.URL())
	}
	if got := postmasterPid(t, c); got == pid {
		t.Errorf("postmaster pid %d unchanged: not restarted", got)
	}
	if _, err := old.Exec(context.Background(), "SELECT 1"); err == nil {
		t.Errorf("a session open across the restart still works")
	}
	if got := queryString(t, c.URL(), "SELECT v FROM kept"); got != "before" {
		t.Errorf("kept = %q", got)
	}
	// Twice in a row works too.
	if err := c.Restart(ctx); err != nil {
		t.Fatalf("second Restart: %v", err)
	}
	exec1(t, c.URL(), "INSERT INTO kept VALUES ('after')")

	pid = postmasterPid(t, c)
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	waitGone(t, pid)
	if err := c.Restart(ctx); err == nil {
		t.Errorf("Restart after Stop succeeded")
	}
	if _, ok := readPidFile(c.pgdata); ok {
		t.Errorf("Restart after Stop started a server")
	}
}
