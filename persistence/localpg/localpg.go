// Package localpg runs a broker-managed local PostgreSQL cluster: initdb on
// first start, reuse after, durable settings.
//
// # Layout
//
// The cluster area is a folder holding:
//
//	data/            the PostgreSQL data folder (PGDATA)
//	run/             the Unix socket folder (unix_socket_directories)
//	postgresql.log   the server log (pg_ctl -l)
//
// The URL of the managed database is written, one line, to
// DataDir/postgres.url (0644), for example
// postgres://postgres@127.0.0.1:54321/queen?sslmode=disable.
//
// When the broker runs as a normal user the cluster area is
// DataDir/postgres and every program runs as that user.
//
// PostgreSQL refuses to run as root, so when the broker runs as root
// initdb, pg_ctl and postgres run as the "postgres" OS user, and the cluster
// area must be reachable by that user. If DataDir and all of its ancestors
// are traversable by "postgres", the area is DataDir/postgres (owned by
// postgres, 0700). Otherwise (for example DataDir under /root, or under a
// 0700 temporary folder) the area is /var/lib/queen-pg/<h> where <h> is the
// first 16 hex digits of sha256(absolute DataDir); /var/lib/queen-pg is
// created 0755 and the area is owned by postgres, 0700. A pointer file
// DataDir/postgres.dir then names the area, and later starts follow it.
//
// # Settings
//
// initdb runs with trust authentication (pg_hba.conf is then rewritten to
// allow only local sockets and 127.0.0.1), UTF8 encoding, C locale, and
// without --no-sync. The settings the broker relies on live in
// PGDATA/queen.conf, included from postgresql.conf and rewritten on every
// start: listen_addresses='127.0.0.1', the port, the socket folder,
// fsync=on, synchronous_commit=on, full_page_writes=on,
// max_connections=200, shared_buffers a quarter of the machine's memory
// up to 1 GB or QUEEN_PG_SHARED_BUFFERS (lowered when the machine cannot
// provide it), wal_compression=lz4 (pglz when the server lacks lz4;
// set on existing clusters too, at their next start, with a reload).
// Settings made with ALTER SYSTEM
// (postgresql.auto.conf) still override them.
//
// # Restarts
//
// An existing cluster is reused, never re-initialised. Its port is kept
// when free; when something else holds it a new free loopback port is
// chosen and queen.conf rewritten. A postmaster left running by a killed
// broker is detected through postmaster.pid and, when it answers, adopted
// as-is (Stop still stops it). A stale postmaster.pid (postmaster killed,
// possibly with its pid since reused by an unrelated process) is handled:
// Start waits for orphaned server processes to exit, removes the stale
// lock file when needed and starts the server, which runs crash recovery.
//
// Restart (a fast stop and a start on the same folder and port, the data
// folder's lock held throughout) is how the load harness's chaos restarts
// the database under a running broker.
package localpg

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// Config configures Start.
type Config struct {
	// Holder names the program taking the data folder ("serve", "migrate"),
	// shown to a process that finds the folder in use. A holder "migrate" is
	// waited for (up to the start's deadline) instead of refused: it ends by
	// itself in seconds.
	Holder string
	// DataDir is the broker data folder ($QUEEN_DATA_DIR). The cluster
	// lives in DataDir/postgres (see the package doc for the root case) and
	// the URL is written to DataDir/postgres.url.
	DataDir string
	// BinDir optionally names the folder holding initdb, pg_ctl and
	// postgres; see FindBinDir.
	BinDir string
	// Logger is optional; slog.Default() when nil.
	Logger *slog.Logger
}

// Cluster is a running managed PostgreSQL cluster.
type Cluster struct {
	binDir  string
	area    string // cluster area folder
	pgdata  string // area/data
	sockDir string // area/run
	logPath string // area/postgresql.log
	owner   *osUser
	log     *slog.Logger

	port int
	url  string

	mu      sync.Mutex
	stopped bool
	lock    *os.File // the data folder's lock, held while this Cluster runs
}

// ErrInUse is returned by Start when another process (a running broker, or
// `queen migrate`) already manages the cluster of that data folder.
var ErrInUse = errors.New("localpg: data folder in use")

// lockName is the data folder's lock file: an exclusive flock held by the
// process managing the cluster. The kernel drops it when that process dies,
// even by SIGKILL, so a leftover postmaster is adopted only when its broker
// is gone, never taken from a live one.
const lockName = "postgres.lock"

// lockDataDir takes the data folder's lock. A folder held by a `migrate` is
// waited for (polling until ctx ends); any other holder is refused at once.
func lockDataDir(ctx context.Context, dataDir, holder string) (*os.File, error) {
	path := filepath.Join(dataDir, lockName)
	for {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return nil, fmt.Errorf("localpg: open lock file: %w", err)
		}
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			if err := f.Truncate(0); err == nil {
				f.WriteAt([]byte(fmt.Sprintf("%d %s\n", os.Getpid(), holder)), 0) //nolint:errcheck // informative only
			}
			return f, nil
		}
		who, _ := os.ReadFile(path)
		f.Close()
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("localpg: lock %s: %w", path, err)
		}
		fields := strings.Fields(string(who))
		inUse := fmt.Errorf("%w: %s is used by another process (pid %s); stop it first, or give this one another data folder",
			ErrInUse, dataDir, strings.Join(fields, " "))
		if len(fields) < 2 || fields[1] != "migrate" {
			return nil, inUse
		}
		select {
		case <-ctx.Done():
			return nil, inUse
		case <-time.After(100 * time.Millisecond):
		}
	}
}

const (
	superuser      = "postgres"
	databaseName   = "queen"
	urlFileName    = "postgres.url"
	dirPointerName = "postgres.dir"
	rootBase       = "/var/lib/queen-pg"
	confName       = "queen.conf"
	maxLogSize     = 16 << 20
	defaultWait    = 60 * time.Second
)

// sharedBuffersSteps are tried in order at every start, the next when the
// server cannot allocate shared memory: QUEEN_PG_SHARED_BUFFERS when set
// (a PostgreSQL size such as "512MB"), else a quarter of the machine's
// memory up to 1 GB, then halves down to 32 MB. At full load the current
// time range of the per-hash sidecar index takes one random insert per
// stored message; once it outgrows shared_buffers every insert writes a
// page out and reads one back, and the push rate falls within minutes.
var sharedBuffersSteps = sharedBuffersFor(os.Getenv("QUEEN_PG_SHARED_BUFFERS"), physicalMemory())

// sharedBuffersFor returns the shared_buffers steps for an override (""
// for none) and a machine of mem bytes (0: unknown, taken as 1 GB).
func sharedBuffersFor(override string, mem uint64) []string {
	steps := []string{"1GB", "512MB", "256MB", "128MB", "64MB", "32MB"}
	sizes := []uint64{1 << 30, 512 << 20, 256 << 20, 128 << 20, 64 << 20, 32 << 20}
	if override = strings.TrimSpace(override); override != "" {
		return append([]string{override}, steps[2:]...)
	}
	if mem == 0 {
		mem = 1 << 30
	}
	for i, sz := range sizes {
		if sz <= mem/4 {
			return steps[i:]
		}
	}
	return steps[len(steps)-1:]
}

// physicalMemory returns the machine's memory in bytes (0 when unknown).
func physicalMemory() uint64 {
	var si syscall.Sysinfo_t
	if err := syscall.Sysinfo(&si); err != nil {
		return 0
	}
	return uint64(si.Totalram) * uint64(si.Unit)
}

// osUser is the OS account the PostgreSQL programs run as.
type osUser struct {
	name string
	uid  int
	gid  int
	gids []int
	cred *syscall.Credential // nil: run as the current process user
}

// Start starts (initialising first if needed) the managed cluster for
// cfg.DataDir and returns once it accepts connections and the "queen"
// database exists. ctx bounds the whole start, including waiting for the
// server (at most 60 s unless ctx has an earlier deadline).
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("localpg: Config.DataDir is empty")
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 2*defaultWait)
		defer cancel()
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With("component", "localpg")

	dataDir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("localpg: data folder %q: %w", cfg.DataDir, err)
	}
	binDir, err := FindBinDir(cfg.BinDir)
	if err != nil {
		return nil, err
	}
	owner, err := currentOwner()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return nil, fmt.Errorf("localpg: create data folder: %w", err)
	}
	lock, err := lockDataDir(ctx, dataDir, cfg.Holder)
	if err != nil {
		return nil, err
	}
	started := false
	defer func() {
		if !started {
			lock.Close()
		}
	}()
	area, err := chooseArea(dataDir, owner)
	if err != nil {
		return nil, err
	}
	c := &Cluster{
		binDir:  binDir,
		area:    area,
		pgdata:  filepath.Join(area, "data"),
		sockDir: filepath.Join(area, "run"),
		logPath: filepath.Join(area, "postgresql.log"),
		owner:   owner,
		log:     log.With("dir", area),
		lock:    lock,
	}
	if err := c.mkdirOwned(area); err != nil {
		return nil, err
	}
	if err := c.mkdirOwned(c.sockDir); err != nil {
		return nil, err
	}

	initialized, err := c.initialized()
	if err != nil {
		return nil, err
	}
	if !initialized {
		if err := c.initdb(ctx); err != nil {
			return nil, err
		}
	}

	adopted, err := c.adoptLeftover(ctx)
	if err != nil {
		return nil, err
	}
	if !adopted {
		c.clearStaleSocketLocks()
		if err := c.startServer(ctx, 0); err != nil {
			return nil, err
		}
	}
	c.url = c.urlFor(databaseName)
	if err := c.setWALCompression(ctx); err != nil {
		if !adopted {
			_ = c.Stop()
		}
		return nil, err
	}
	if err := c.ensureDatabase(ctx); err != nil {
		if !adopted {
			_ = c.Stop()
		}
		return nil, err
	}
	if err := writeFileAtomic(filepath.Join(dataDir, urlFileName), []byte(c.url+"\n"), 0o644); err != nil {
		if !adopted {
			_ = c.Stop()
		}
		return nil, fmt.Errorf("localpg: write URL file: %w", err)
	}
	c.log.Info("local PostgreSQL ready", "url", c.url, "adopted", adopted)
	started = true
	return c, nil
}

// URL returns the URL of the "queen" database,
// postgres://postgres@127.0.0.1:PORT/queen?sslmode=disable.
func (c *Cluster) URL() string { return c.url }

// Dir returns the cluster area folder (holding data/, run/ and
// postgresql.log).
func (c *Cluster) Dir() string { return c.area }

// Port returns the TCP port the server listens on (127.0.0.1).
func (c *Cluster) Port() int { return c.port }

// Stop stops the server (pg_ctl stop -m fast) and returns once the
// postmaster process has exited, not merely once it removed postmaster.pid
// (it does that on its way out, before the process is gone), waiting up to
// 70 s. It is idempotent.
func (c *Cluster) Stop() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return nil
	}
	err := c.stop()
	if c.stopped && c.lock != nil {
		c.lock.Close() // releases the data folder
		c.lock = nil
	}
	return err
}

// Restart stops the server with a fast shutdown (pg_ctl stop -m fast:
// every session is ended, SQLSTATE 57P01, and its open transaction rolled
// back; a shutdown checkpoint is written) and starts it again on the same
// data folder and port, returning once it accepts connections. Clients see
// their connections end and new connections refused meanwhile; a pool
// reconnects on its own afterwards. The URL does not change: when something
// else took the port meanwhile Restart fails (the server then stays
// stopped; Stop is still safe). The data folder's lock stays held
// throughout. It bounds the start by ctx (and 60 s) and the stop by 70 s;
// after Stop it fails. The load harness's --chaos pg-restart uses it.
func (c *Cluster) Restart(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return errors.New("localpg: Restart after Stop")
	}
	if err := c.stop(); err != nil {
		return err
	}
	// stop marked the cluster stopped; it is ours to start again (the lock
	// is still held).
	c.stopped = false
	c.clearStaleSocketLocks()
	if err := c.startServer(ctx, c.port); err != nil {
		return fmt.Errorf("localpg: restart on port %d: %w", c.port, err)
	}
	c.log.Info("local PostgreSQL restarted", "port", c.port)
	return nil
}

func (c *Cluster) stop() error {
	pf, ok := readPidFile(c.pgdata)
	if !ok {
		c.stopped = true
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), defaultWait+10*time.Second)
	defer cancel()
	out, err := c.run(ctx, "pg_ctl", "stop", "-D", c.pgdata, "-m", "fast", "-w",
		"-t", strconv.Itoa(int(defaultWait/time.Second)))
	if err != nil {
		if _, ok := readPidFile(c.pgdata); !ok {
			if err := c.waitExited(ctx, pf.pid); err != nil {
				return err
			}
			c.stopped = true
			return nil
		}
		return fmt.Errorf("localpg: pg_ctl stop: %w: %s%s", err, strings.TrimSpace(out), c.logTail(0))
	}
	if err := c.waitExited(ctx, pf.pid); err != nil {
		return err
	}
	c.stopped = true
	c.log.Info("local PostgreSQL stopped")
	return nil
}

// waitExited polls until the postmaster pid has exited (a zombie counts as
// exited, and so does a pid reused by a process that is not postgres).
// pg_ctl stop -w returns when postmaster.pid is gone, which the postmaster
// removes during its own exit, so the process may still be alive for a
// moment after it, longer on a busy machine.
func (c *Cluster) waitExited(ctx context.Context, pid int) error {
	if !procAvailable() {
		return nil // nothing to look at: trust pg_ctl
	}
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for isPostgresPid(pid) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("localpg: postmaster (pid %d) still running after pg_ctl stop: %w%s", pid, ctx.Err(), c.logTail(0))
		case <-tick.C:
		}
	}
	return nil
}

// currentOwner returns the OS account PostgreSQL runs as: "postgres" when
// this process is root, the current user otherwise.
func currentOwner() (*osUser, error) {
	if os.Geteuid() != 0 {
		u := &osUser{uid: os.Geteuid(), gid: os.Getegid()}
		if cu, err := user.Current(); err == nil {
			u.name = cu.Username
		}
		return u, nil
	}
	pu, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("localpg: running as root needs the \"postgres\" OS user to run PostgreSQL as: %w", err)
	}
	uid, err1 := strconv.Atoi(pu.Uid)
	gid, err2 := strconv.Atoi(pu.Gid)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("localpg: unusable uid/gid %q/%q for OS user postgres", pu.Uid, pu.Gid)
	}
	u := &osUser{name: pu.Username, uid: uid, gid: gid, gids: []int{gid}}
	if ids, err := pu.GroupIds(); err == nil {
		for _, s := range ids {
			if g, err := strconv.Atoi(s); err == nil {
				u.gids = append(u.gids, g)
			}
		}
	}
	u.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	return u, nil
}

// chooseArea picks the cluster area folder for dataDir (see the package
// doc).
func chooseArea(dataDir string, owner *osUser) (string, error) {
	local := filepath.Join(dataDir, "postgres")
	if owner.cred == nil {
		return local, nil
	}
	pointer := filepath.Join(dataDir, dirPointerName)
	if b, err := os.ReadFile(pointer); err == nil {
		if p := strings.TrimSpace(string(b)); p != "" && filepath.IsAbs(p) {
			return p, nil
		}
	}
	if _, err := os.Stat(filepath.Join(local, "data", "PG_VERSION")); err == nil {
		return local, nil
	}
	if traversable(dataDir, owner) {
		return local, nil
	}
	sum := sha256.Sum256([]byte(dataDir))
	area := filepath.Join(rootBase, hex.EncodeToString(sum[:])[:16])
	if err := os.MkdirAll(rootBase, 0o755); err != nil {
		return "", fmt.Errorf("localpg: create %s: %w", rootBase, err)
	}
	if err := os.Chmod(rootBase, 0o755); err != nil {
		return "", fmt.Errorf("localpg: chmod %s: %w", rootBase, err)
	}
	if err := writeFileAtomic(pointer, []byte(area+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("localpg: write %s: %w", pointer, err)
	}
	return area, nil
}

// traversable reports whether owner may search dir and every ancestor.
func traversable(dir string, owner *osUser) bool {
	for d := dir; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return false
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return false
		}
		perm := fi.Mode().Perm()
		var bit os.FileMode
		switch {
		case int(st.Uid) == owner.uid:
			bit = 0o100
		case containsInt(owner.gids, int(st.Gid)):
			bit = 0o010
		default:
			bit = 0o001
		}
		if perm&bit == 0 {
			return false
		}
		if d == filepath.Dir(d) {
			return true
		}
	}
}

func containsInt(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// mkdirOwned creates dir (0700) if needed and makes sure it belongs to the
// cluster owner.
func (c *Cluster) mkdirOwned(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("localpg: create %s: %w", dir, err)
	}
	return c.chown(dir)
}

func (c *Cluster) chown(path string) error {
	if c.owner.cred == nil {
		return nil
	}
	if err := os.Lchown(path, c.owner.uid, c.owner.gid); err != nil {
		return fmt.Errorf("localpg: chown %s: %w", path, err)
	}
	return nil
}

// writeOwned writes a file the server reads, owned by the cluster owner.
func (c *Cluster) writeOwned(path string, data []byte, perm os.FileMode) error {
	if err := writeFileAtomic(path, data, perm); err != nil {
		return fmt.Errorf("localpg: write %s: %w", path, err)
	}
	return c.chown(path)
}

// writeFileAtomic writes data to path through a synced temporary file and
// a rename.
func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Chmod(tmp, perm); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, path)
}

// initialized reports whether pgdata holds a complete cluster. A missing or
// empty folder is not initialised; a non-empty folder that is not a cluster
// is an error.
func (c *Cluster) initialized() (bool, error) {
	if _, err := os.Stat(filepath.Join(c.pgdata, "PG_VERSION")); err == nil {
		return true, nil
	}
	entries, err := os.ReadDir(c.pgdata)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("localpg: read %s: %w", c.pgdata, err)
	}
	if len(entries) > 0 {
		return false, fmt.Errorf("localpg: %s is not empty and holds no PostgreSQL cluster (no PG_VERSION)", c.pgdata)
	}
	return false, nil
}

// initdb creates the cluster in a temporary sibling folder and renames it
// into place, so an interrupted initdb never leaves a half-made cluster.
func (c *Cluster) initdb(ctx context.Context) error {
	tmp := c.pgdata + ".initdb"
	if err := os.RemoveAll(tmp); err != nil {
		return fmt.Errorf("localpg: remove %s: %w", tmp, err)
	}
	if err := c.mkdirOwned(tmp); err != nil {
		return err
	}
	c.log.Info("initialising local PostgreSQL cluster", "bin", c.binDir)
	start := time.Now()
	out, err := c.run(ctx, "initdb", "-D", tmp, "-U", superuser, "-E", "UTF8",
		"--locale=C", "--auth=trust")
	if err != nil {
		os.RemoveAll(tmp)
		return fmt.Errorf("localpg: initdb: %w\n%s", err, lastLines(out, 20))
	}
	hba := "# Managed by queen (persistence/localpg): trust on local sockets and 127.0.0.1 only.\n" +
		"# TYPE  DATABASE     USER  ADDRESS        METHOD\n" +
		"local   all          all                  trust\n" +
		"host    all          all   127.0.0.1/32   trust\n" +
		"local   replication  all                  trust\n" +
		"host    replication  all   127.0.0.1/32   trust\n"
	if err := c.writeOwned(filepath.Join(tmp, "pg_hba.conf"), []byte(hba), 0o600); err != nil {
		os.RemoveAll(tmp)
		return err
	}
	confPath := filepath.Join(tmp, "postgresql.conf")
	f, err := os.OpenFile(confPath, os.O_WRONLY|os.O_APPEND, 0)
	if err == nil {
		_, err = f.WriteString("\n# Settings managed by queen (persistence/localpg), rewritten on every start.\ninclude '" + confName + "'\n")
		if err2 := f.Sync(); err == nil {
			err = err2
		}
		if err2 := f.Close(); err == nil {
			err = err2
		}
	}
	if err != nil {
		os.RemoveAll(tmp)
		return fmt.Errorf("localpg: append to %s: %w", confPath, err)
	}
	if err := os.Remove(c.pgdata); err != nil && !errors.Is(err, os.ErrNotExist) {
		os.RemoveAll(tmp)
		return fmt.Errorf("localpg: remove empty %s: %w", c.pgdata, err)
	}
	if err := os.Rename(tmp, c.pgdata); err != nil {
		os.RemoveAll(tmp)
		return fmt.Errorf("localpg: rename %s: %w", tmp, err)
	}
	syncDir(c.area)
	c.log.Info("local PostgreSQL cluster initialised", "took", time.Since(start).Round(time.Millisecond))
	return nil
}

func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
}

// adoptLeftover looks at postmaster.pid. When a postmaster of this cluster
// is alive it waits for it to answer and adopts it (true). When the file
// is stale it makes sure a normal start can proceed (false).
func (c *Cluster) adoptLeftover(ctx context.Context) (bool, error) {
	pf, ok := readPidFile(c.pgdata)
	if !ok {
		return false, nil
	}
	dataInfo, err := os.Stat(c.pgdata)
	if err != nil {
		return false, fmt.Errorf("localpg: %w", err)
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var lastErr error
	for {
		if !procAvailable() {
			// Without /proc we cannot tell; let pg_ctl decide.
			return false, nil
		}
		if !isPostgresIn(pf.pid, dataInfo) {
			break
		}
		if pf.port > 0 {
			if lastErr = c.ping(ctx, pf.port); lastErr == nil {
				c.port = pf.port
				c.log.Info("adopting running PostgreSQL left by a previous broker", "pid", pf.pid, "port", pf.port)
				return true, nil
			}
		}
		select {
		case <-ctx.Done():
			return false, fmt.Errorf("localpg: a postmaster (pid %d) is running in %s but does not answer on port %d: %v (last error: %v)%s",
				pf.pid, c.pgdata, pf.port, ctx.Err(), lastErr, c.logTail(0))
		case <-tick.C:
		}
		next, ok := readPidFile(c.pgdata)
		if !ok {
			return false, nil // it went away
		}
		pf = next
	}

	// Stale postmaster.pid: wait for orphaned server processes (a killed
	// postmaster's children exit on their own once they notice) so the new
	// postmaster does not find the old shared memory still in use.
	for {
		pids := postgresProcessesIn(dataInfo)
		if len(pids) == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return false, fmt.Errorf("localpg: old PostgreSQL processes %v still run in %s without their postmaster", pids, c.pgdata)
		case <-tick.C:
		}
	}
	if pidExists(pf.pid) {
		// The pid was reused by an unrelated process (or is a zombie not yet
		// reaped): postgres would take the lock file as held. No process of this cluster is alive (just
		// checked), so the lock file is stale: remove it.
		c.log.Warn("removing stale postmaster.pid whose pid still exists (reused by another process, or an unreaped zombie)", "pid", pf.pid)
		if err := os.Remove(filepath.Join(c.pgdata, "postmaster.pid")); err != nil && !errors.Is(err, os.ErrNotExist) {
			return false, fmt.Errorf("localpg: remove stale postmaster.pid: %w", err)
		}
	} else {
		c.log.Info("stale postmaster.pid from a stopped server; starting with crash recovery", "pid", pf.pid)
	}
	return false, nil
}

// clearStaleSocketLocks removes socket lock files in our private socket
// folder whose pid is held by something other than a server of this
// cluster. PostgreSQL removes a lock file whose pid is gone, but refuses
// one whose pid still exists: a reused pid, or a killed postmaster left as
// a zombie because nothing reaps it (as under some container inits).
func (c *Cluster) clearStaleSocketLocks() {
	if !procAvailable() {
		return
	}
	dataInfo, err := os.Stat(c.pgdata)
	if err != nil || len(postgresProcessesIn(dataInfo)) > 0 {
		return
	}
	locks, _ := filepath.Glob(filepath.Join(c.sockDir, ".s.PGSQL.*.lock"))
	for _, lock := range locks {
		b, err := os.ReadFile(lock)
		if err != nil {
			continue
		}
		first, _, _ := strings.Cut(string(b), "\n")
		pid, err := strconv.Atoi(strings.TrimSpace(first))
		if err != nil || !pidExists(pid) || isPostgresIn(pid, dataInfo) {
			continue
		}
		c.log.Warn("removing stale socket lock file", "file", lock, "pid", pid)
		_ = os.Remove(strings.TrimSuffix(lock, ".lock"))
		_ = os.Remove(lock)
	}
}

// ping connects to the maintenance database on port and checks that the
// server runs on this cluster's data folder.
func (c *Cluster) ping(ctx context.Context, port int) error {
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	conn, err := c.connect(cctx, port, "postgres")
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	var dir string
	if err := conn.QueryRow(cctx, "SHOW data_directory").Scan(&dir); err != nil {
		return err
	}
	a, err1 := os.Stat(dir)
	b, err2 := os.Stat(c.pgdata)
	if err1 != nil || err2 != nil || !os.SameFile(a, b) {
		return fmt.Errorf("server on port %d serves %s, not %s", port, dir, c.pgdata)
	}
	return nil
}

func (c *Cluster) connect(ctx context.Context, port int, db string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(c.urlForPort(port, db))
	if err != nil {
		return nil, err
	}
	cfg.ConnectTimeout = 3 * time.Second
	return pgx.ConnectConfig(ctx, cfg)
}

func (c *Cluster) urlFor(db string) string { return c.urlForPort(c.port, db) }

func (c *Cluster) urlForPort(port int, db string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User(superuser),
		Host:     net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		Path:     "/" + db,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

// startServer writes queen.conf and runs pg_ctl start, retrying with a new
// port when the port was taken meanwhile and with smaller shared_buffers
// when shared memory cannot be had. With keepPort > 0 the server must
// listen on that port: a port taken by something else is an error, never a
// new port (Restart: the clients' URL must not change).
func (c *Cluster) startServer(ctx context.Context, keepPort int) error {
	settings := c.readConf()
	port := settings.port
	if keepPort > 0 {
		port = keepPort
	} else if port > 0 && !portFree(port) {
		c.log.Info("configured port is taken, choosing another", "port", port)
		port = 0
	}
	// Every start tries the largest step first (the machine, or the
	// override, may have changed since the last).
	buffers := 0
	portRetries := 0
	for {
		if port == 0 {
			p, err := freePort()
			if err != nil {
				return fmt.Errorf("localpg: choose a port: %w", err)
			}
			port = p
		}
		if err := c.writeConf(port, sharedBuffersSteps[buffers], settings.walCompression); err != nil {
			return err
		}
		c.rotateLog()
		logStart := fileSize(c.logPath)
		before, _ := readPidFile(c.pgdata)

		wait := defaultWait
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < wait {
			wait = time.Until(dl)
		}
		secs := int(wait / time.Second)
		if secs < 1 {
			secs = 1
		}
		out, err := c.run(ctx, "pg_ctl", "start", "-D", c.pgdata, "-l", c.logPath, "-w", "-t", strconv.Itoa(secs))
		if err == nil {
			c.port = port
			c.log.Info("local PostgreSQL started", "port", port, "shared_buffers", sharedBuffersSteps[buffers])
			return nil
		}
		tail := tailFile(c.logPath, logStart, 30)
		// pg_ctl may give up waiting while the server keeps starting:
		// do not leave it behind.
		if pf, ok := readPidFile(c.pgdata); ok && pf.pid != before.pid && processAlive(pf.pid) {
			sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			_, _ = c.run(sctx, "pg_ctl", "stop", "-D", c.pgdata, "-m", "immediate", "-w", "-t", "30")
			cancel()
		}
		switch {
		case ctx.Err() != nil:
		case keepPort > 0 && (strings.Contains(tail, "could not bind") || strings.Contains(tail, "Address already in use")):
			// Restart keeps its port: say so below.
		case strings.Contains(tail, "could not bind") || strings.Contains(tail, "Address already in use"):
			if portRetries < 5 {
				portRetries++
				c.log.Info("port taken while starting, choosing another", "port", port)
				port = 0
				continue
			}
		case strings.Contains(tail, "shared memory") && !strings.Contains(tail, "pre-existing shared memory") &&
			buffers+1 < len(sharedBuffersSteps):
			buffers++
			c.log.Warn("not enough shared memory, lowering shared_buffers", "shared_buffers", sharedBuffersSteps[buffers])
			continue
		}
		msg := strings.TrimSpace(out)
		if tail != "" {
			msg += "\n--- " + c.logPath + " (tail) ---\n" + tail
		}
		return fmt.Errorf("localpg: pg_ctl start failed: %w\n%s", err, msg)
	}
}

type confSettings struct {
	port           int
	sharedBuffers  string
	walCompression string
}

// readConf reads the settings we own from queen.conf (zero values when
// absent).
func (c *Cluster) readConf() confSettings {
	var s confSettings
	b, err := os.ReadFile(filepath.Join(c.pgdata, confName))
	if err != nil {
		return s
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		k = strings.TrimSpace(k)
		v = strings.Trim(strings.TrimSpace(v), "'")
		switch k {
		case "port":
			s.port, _ = strconv.Atoi(v)
		case "shared_buffers":
			s.sharedBuffers = v
		case "wal_compression":
			s.walCompression = v
		}
	}
	return s
}

func (c *Cluster) writeConf(port int, sharedBuffers, walCompression string) error {
	sock := c.sockDir
	// The socket path (folder + "/.s.PGSQL.NNNNN") must fit in sun_path
	// (108 bytes); a too-deep folder would stop the server from starting,
	// so fall back to TCP only.
	if len(sock)+len("/.s.PGSQL.65535") >= 107 {
		c.log.Warn("socket folder path too long for a Unix socket; listening on TCP only", "folder", sock)
		sock = ""
	}
	conf := fmt.Sprintf(`# Managed by queen (persistence/localpg). Rewritten on every start.
listen_addresses = '127.0.0.1'
port = %d
unix_socket_directories = '%s'
fsync = on
synchronous_commit = on
full_page_writes = on
max_connections = 200
shared_buffers = '%s'
# Fewer, spread checkpoints: less WAL from full-page images under a steady
# push load. Durability is unchanged (every commit is still flushed).
max_wal_size = '4GB'
min_wal_size = '512MB'
checkpoint_timeout = '15min'
logging_collector = off
log_destination = 'stderr'
log_line_prefix = '%%m [%%p] '
`, port, strings.ReplaceAll(sock, "'", "''"), sharedBuffers)
	if walCompression != "" {
		// Full-page images compressed (chosen by setWALCompression).
		conf += "wal_compression = '" + walCompression + "'\n"
	}
	return c.writeOwned(filepath.Join(c.pgdata, confName), []byte(conf), 0o600)
}

// rotateLog moves a large log aside before a start.
func (c *Cluster) rotateLog() {
	if fileSize(c.logPath) > maxLogSize {
		_ = os.Rename(c.logPath, c.logPath+".1")
	}
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

func (c *Cluster) logTail(from int64) string {
	tail := tailFile(c.logPath, from, 30)
	if tail == "" {
		return ""
	}
	return "\n--- " + c.logPath + " (tail) ---\n" + tail
}

// setWALCompression compresses the full-page images in the WAL with lz4
// when the server was built with it, else with pglz: random inserts into a
// btree write a full page image per page first touched after each
// checkpoint, most of the WAL under a steady push load. The choice is kept
// in queen.conf (so every later start has it at once); an existing cluster
// whose queen.conf lacks it, or has another value, gets it rewritten and
// reloaded (wal_compression needs no restart).
func (c *Cluster) setWALCompression(ctx context.Context) error {
	conn, err := c.connect(ctx, c.port, "postgres")
	if err != nil {
		return fmt.Errorf("localpg: connect to local PostgreSQL: %w%s", err, c.logTail(0))
	}
	defer conn.Close(context.Background())
	var lz4 bool
	if err := conn.QueryRow(ctx, "SELECT 'lz4' = ANY (enumvals) FROM pg_settings WHERE name = 'wal_compression'").Scan(&lz4); err != nil {
		return fmt.Errorf("localpg: read wal_compression: %w", err)
	}
	want := "pglz"
	if lz4 {
		want = "lz4"
	}
	settings := c.readConf()
	if settings.walCompression == want {
		return nil
	}
	buffers := settings.sharedBuffers
	if buffers == "" {
		buffers = sharedBuffersSteps[0]
	}
	if err := c.writeConf(c.port, buffers, want); err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
		return fmt.Errorf("localpg: reload settings: %w", err)
	}
	c.log.Info("WAL compression set", "wal_compression", want)
	return nil
}

// ensureDatabase creates the "queen" database when missing.
func (c *Cluster) ensureDatabase(ctx context.Context) error {
	conn, err := c.connect(ctx, c.port, "postgres")
	if err != nil {
		return fmt.Errorf("localpg: connect to local PostgreSQL: %w%s", err, c.logTail(0))
	}
	defer conn.Close(context.Background())
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", databaseName).Scan(&exists); err != nil {
		return fmt.Errorf("localpg: look up database %s: %w", databaseName, err)
	}
	if exists {
		return nil
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{databaseName}.Sanitize()); err != nil {
		if !strings.Contains(err.Error(), "42P04") { // duplicate_database: created concurrently
			return fmt.Errorf("localpg: create database %s: %w", databaseName, err)
		}
	}
	c.log.Info("created database", "database", databaseName)
	return nil
}

// run runs a PostgreSQL program from binDir as the cluster owner and
// returns its combined output.
func (c *Cluster) run(ctx context.Context, prog string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(c.binDir, prog), args...)
	cmd.Dir = c.area
	cmd.Env = c.env()
	if c.owner.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.owner.cred}
	}
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// env is the environment for PostgreSQL programs: ours without PG*
// variables (which could point them elsewhere), with C messages.
func (c *Cluster) env() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "PG") || k == "LANG" || strings.HasPrefix(k, "LC_") || (c.owner.cred != nil && (k == "HOME" || k == "USER" || k == "LOGNAME")) {
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "LC_ALL=C", "LANG=C")
	if c.owner.cred != nil {
		env = append(env, "HOME="+c.area, "USER="+c.owner.name, "LOGNAME="+c.owner.name)
	}
	return env
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	return port, l.Close()
}

// portFree reports whether 127.0.0.1:port can be bound now.
func portFree(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
