package localpg

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// StandbyName is the application_name a standby made by StartStandby
// streams under, and the primary's synchronous_standby_names.
const StandbyName = "queen_standby"

// StartStandby makes a synchronous streaming standby of the running cluster
// c on loopback (SPEC.md §9: PostgreSQL's own streaming replication, no
// replication of our own): pg_basebackup of c into the sibling folder
// <c.Dir()>-standby (any previous one there is removed first), started on a
// free port with primary_conninfo pointing at c, then c's
// synchronous_standby_names set to StandbyName (ALTER SYSTEM, a reload) and
// waited for until pg_stat_replication reports the standby as sync. From
// then on every commit on c returns only once the standby has flushed it,
// so a commit answered to a client survives the loss of c.
//
// The standby is a *Cluster: URL, Port and Dir name it, Stop stops it,
// Promote makes it the primary. It holds no data-folder lock. ctx bounds
// the whole start (the base backup copies the database).
func (c *Cluster) StartStandby(ctx context.Context) (*Cluster, error) {
	c.mu.Lock()
	stopped, primaryPort := c.stopped, c.port
	c.mu.Unlock()
	if stopped {
		return nil, errors.New("localpg: StartStandby of a stopped cluster")
	}
	area := c.area + "-standby"
	s := &Cluster{
		binDir:  c.binDir,
		area:    area,
		pgdata:  filepath.Join(area, "data"),
		sockDir: filepath.Join(area, "run"),
		logPath: filepath.Join(area, "postgresql.log"),
		owner:   c.owner,
		log:     c.log.With("standby", area),
	}
	if pf, ok := readPidFile(s.pgdata); ok && isPostgresPid(pf.pid) {
		if fi, err := os.Stat(s.pgdata); err == nil && isPostgresIn(pf.pid, fi) {
			return nil, fmt.Errorf("localpg: a server (pid %d) still runs in %s", pf.pid, s.pgdata)
		}
	}
	if err := os.RemoveAll(area); err != nil {
		return nil, fmt.Errorf("localpg: remove old standby %s: %w", area, err)
	}
	if err := s.mkdirOwned(area); err != nil {
		return nil, err
	}
	if err := s.mkdirOwned(s.sockDir); err != nil {
		return nil, err
	}
	conninfo := fmt.Sprintf("host=127.0.0.1 port=%d user=%s application_name=%s", primaryPort, superuser, StandbyName)
	start := time.Now()
	out, err := s.run(ctx, "pg_basebackup", "-D", s.pgdata, "-d", conninfo, "-R", "-X", "stream", "-c", "fast")
	if err != nil {
		return nil, fmt.Errorf("localpg: pg_basebackup: %w\n%s", err, lastLines(out, 20))
	}
	s.log.Info("base backup taken", "took", time.Since(start).Round(time.Millisecond))
	// The copied queen.conf names the primary's port and socket folder;
	// startServer rewrites it for the standby's own.
	if err := s.startServer(ctx, 0); err != nil {
		return nil, err
	}
	s.url = s.urlFor(databaseName)

	conn, err := c.connect(ctx, primaryPort, databaseName)
	if err != nil {
		_ = s.Stop()
		return nil, fmt.Errorf("localpg: connect to the primary: %w", err)
	}
	defer conn.Close(context.Background())
	for _, q := range []string{
		"ALTER SYSTEM SET synchronous_standby_names = '" + StandbyName + "'",
		"SELECT pg_reload_conf()",
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			_ = s.Stop()
			return nil, fmt.Errorf("localpg: %s: %w", q, err)
		}
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		var state string
		err := conn.QueryRow(ctx, `SELECT COALESCE((SELECT sync_state FROM pg_stat_replication WHERE application_name = $1 LIMIT 1), '')`, StandbyName).Scan(&state)
		if err == nil && state == "sync" {
			break
		}
		select {
		case <-ctx.Done():
			_ = s.Stop()
			return nil, fmt.Errorf("localpg: standby not in sync (state %q): %w%s", state, ctx.Err(), s.logTail(0))
		case <-tick.C:
		}
	}
	s.log.Info("synchronous standby streaming", "port", s.port, "primary_port", primaryPort)
	return s, nil
}

// Promote ends the standby's recovery (pg_ctl promote) and returns once it
// accepts writes (pg_is_in_recovery() is false). Its own configuration names
// no synchronous standby, so its commits do not wait for one.
func (c *Cluster) Promote(ctx context.Context) error {
	out, err := c.run(ctx, "pg_ctl", "promote", "-D", c.pgdata, "-w", "-t", strconv.Itoa(int(defaultWait/time.Second)))
	if err != nil {
		return fmt.Errorf("localpg: pg_ctl promote: %w: %s%s", err, strings.TrimSpace(out), c.logTail(0))
	}
	conn, err := c.connect(ctx, c.port, databaseName)
	if err != nil {
		return fmt.Errorf("localpg: connect to the promoted server: %w", err)
	}
	defer conn.Close(context.Background())
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		var recovering bool
		if err := conn.QueryRow(ctx, `SELECT pg_is_in_recovery()`).Scan(&recovering); err != nil {
			return fmt.Errorf("localpg: promoted server: %w", err)
		}
		if !recovering {
			c.log.Info("standby promoted", "port", c.port)
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("localpg: promotion not finished: %w", ctx.Err())
		case <-tick.C:
		}
	}
}

// Kill ends the server as a crash of its machine would: SIGKILL to the
// postmaster and then to every postgres process working in its data folder,
// without a shutdown checkpoint, and returns once none is left (at most
// 30 s). Clients see their connections reset. Like Stop it is final for
// this Cluster (Stop is then a no-op) and releases the data-folder lock; a
// later Start on the folder runs crash recovery.
func (c *Cluster) Kill() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return nil
	}
	fi, err := os.Stat(c.pgdata)
	if err != nil {
		return fmt.Errorf("localpg: kill: %w", err)
	}
	if pf, ok := readPidFile(c.pgdata); ok && isPostgresIn(pf.pid, fi) {
		_ = syscall.Kill(pf.pid, syscall.SIGKILL)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		pids := postgresProcessesIn(fi)
		if len(pids) == 0 {
			break
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("localpg: kill: postgres processes %v still running", pids)
		}
		time.Sleep(5 * time.Millisecond) // polling /proc for the SIGKILLed processes to go
	}
	c.stopped = true
	if c.lock != nil {
		c.lock.Close()
		c.lock = nil
	}
	c.log.Warn("local PostgreSQL killed (SIGKILL)", "port", c.port)
	return nil
}

// FailoverURL is the URL of the "queen" database on any of clusters, for
// pgx's multi-host fallback: postgres://postgres@127.0.0.1:P1,127.0.0.1:P2/
// queen?sslmode=disable&target_session_attrs=read-write. A connection goes
// to the first host that accepts writes, so clients given it follow a
// promotion by themselves (SPEC.md §9).
func FailoverURL(clusters ...*Cluster) string {
	hosts := make([]string, len(clusters))
	for i, c := range clusters {
		hosts[i] = net.JoinHostPort("127.0.0.1", strconv.Itoa(c.Port()))
	}
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User(superuser),
		Host:     strings.Join(hosts, ","),
		Path:     "/" + databaseName,
		RawQuery: "sslmode=disable&target_session_attrs=read-write",
	}
	return u.String()
}
