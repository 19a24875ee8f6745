package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/persistence/localpg"
	"github.com/queen-mq/queen-go/transport/client"
)

// ClusterConfig describes the brokers `queen loadtest --brokers N` starts:
// N `queen serve` processes sharing one managed PostgreSQL and one NATS
// server (both run by the load-test process), or a NATS cluster of
// NATSNodes processes.
type ClusterConfig struct {
	// Brokers is the number of broker processes (at least 1).
	Brokers int
	// Exe is the queen binary run as `Exe serve` (default: this process's
	// own executable, os.Executable).
	Exe string
	// Env is added to every broker's environment (after this process's).
	Env []string
	// PGBin names the PostgreSQL binaries of the managed cluster ("": found
	// as `queen serve` finds them).
	PGBin string
	// Lease is the brokers' QUEEN_SHARD_LEASE (0: their default).
	Lease time.Duration
	// LogLevel is the brokers' QUEEN_LOG_LEVEL (default info).
	LogLevel string
	// TempParent is where the temporary folder is made ("": os.TempDir()).
	TempParent string
	// PGStandby gives the managed PostgreSQL a synchronous streaming
	// standby on loopback (localpg.Cluster.StartStandby, --pg-standby): the
	// brokers' DATABASE_URL lists both servers (localpg.FailoverURL), so
	// they follow a promotion by themselves, and PGFailover can kill
	// the primary and promote the standby (SPEC.md §9).
	PGStandby bool
	// NATSNodes, when > 0, replaces the in-process NATS server by a NATS
	// cluster of that many `Exe nats-node` processes routed to each other on
	// loopback (SPEC.md §9), each a process of its own so that
	// NATSKill's SIGKILL is real. The brokers' NATS_URL and the run's
	// target list every node (NATSURL); the NATS client picks a random
	// server of the list for each connection, so the brokers' connections
	// are spread over the nodes, and the load's clients start at node i mod
	// NATSNodes (client i, the list rotated).
	NATSNodes int
	// Status receives one line per step (nil: none).
	Status io.Writer
}

// Cluster is a running set of broker processes with their PostgreSQL and
// NATS server, in a temporary folder that Close removes.
type Cluster struct {
	cfg     ClusterConfig
	dir     string
	pg      *localpg.Cluster // the primary
	standby *localpg.Cluster // its synchronous standby (PGStandby), nil once promoted
	dbURL   string           // the brokers' DATABASE_URL
	retired []*localpg.Cluster
	ns      *server.Server // the in-process NATS server (NATSNodes 0)
	nodes   []*natsNode    // the NATS node processes (NATSNodes > 0)
	natsURL string
	brokers []*brokerProc
	hc      *http.Client
}

// brokerProc is one broker process; restarts keep its index and port.
type brokerProc struct {
	idx     int
	addr    string // 127.0.0.1:port
	url     string // http://127.0.0.1:port
	logPath string
	dataDir string

	proc        // up: started, healthy and not killed
	id   string // the broker id it reports (GET /api/v1/cluster "self"), under mu
}

// StartCluster starts the managed PostgreSQL, the NATS server (or the
// cfg.NATSNodes node processes, every route up) and cfg.Brokers brokers,
// and waits until each answers /health and every shard has a live owner.
// On error everything started is stopped.
func StartCluster(ctx context.Context, cfg ClusterConfig) (c *Cluster, err error) {
	if cfg.Brokers < 1 {
		return nil, fmt.Errorf("brokers %d: want at least 1", cfg.Brokers)
	}
	if cfg.Exe == "" {
		if cfg.Exe, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("find this program to start brokers: %w", err)
		}
	}
	if cfg.LogLevel == "" {
		cfg.LogLevel = "info"
	}
	c = &Cluster{cfg: cfg, hc: &http.Client{Timeout: 5 * time.Second}}
	if c.dir, err = os.MkdirTemp(cfg.TempParent, "queen-loadtest-cluster-"); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			c.Close(true)
			c = nil
		}
	}()
	// Reachable by the postgres OS user when running as root, so the
	// managed cluster lives inside the folder.
	if err := os.Chmod(c.dir, 0o755); err != nil {
		return c, err
	}
	c.status("loadtest: cluster folder %s", c.dir)

	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Minute)
	defer cancel()
	c.pg, err = localpg.Start(pctx, localpg.Config{Holder: "loadtest", DataDir: filepath.Join(c.dir, "pg"), BinDir: cfg.PGBin,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return c, fmt.Errorf("start the managed PostgreSQL: %w", err)
	}
	c.status("loadtest: PostgreSQL cluster in %s", c.pg.Dir())
	c.dbURL = c.pg.URL()
	if cfg.PGStandby {
		if c.standby, err = c.pg.StartStandby(pctx); err != nil {
			return c, fmt.Errorf("start the PostgreSQL standby: %w", err)
		}
		c.dbURL = localpg.FailoverURL(c.pg, c.standby)
		c.status("loadtest: synchronous PostgreSQL standby in %s (port %d)", c.standby.Dir(), c.standby.Port())
	}

	if cfg.NATSNodes > 0 {
		if err := c.startNATSNodes(pctx, cfg.NATSNodes); err != nil {
			return c, err
		}
	} else if err := c.startNATSServer(); err != nil {
		return c, err
	}

	for i := range cfg.Brokers {
		port, err := freePort()
		if err != nil {
			return c, err
		}
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		c.brokers = append(c.brokers, &brokerProc{idx: i, addr: addr, url: "http://" + addr,
			logPath: filepath.Join(c.dir, fmt.Sprintf("broker-%d.log", i)), dataDir: filepath.Join(c.dir, fmt.Sprintf("broker-%d", i))})
	}
	// Start them together, then wait for each.
	for _, b := range c.brokers {
		if err := c.spawn(b); err != nil {
			return c, err
		}
	}
	for _, b := range c.brokers {
		if err := c.waitReady(pctx, b); err != nil {
			return c, err
		}
	}
	if err := c.waitOwned(pctx, 2*max(cfg.Lease, 10*time.Second)+10*time.Second); err != nil {
		return c, err
	}
	c.status("loadtest: %d brokers ready: %s", len(c.brokers), strings.Join(c.HTTPURLs(), " "))
	return c, nil
}

// startNATSServer starts the in-process NATS server (NATSNodes 0).
func (c *Cluster) startNATSServer() error {
	ns, err := server.NewServer(&server.Options{ServerName: "queen-loadtest", Host: "127.0.0.1", Port: server.RANDOM_PORT,
		MaxPayload: queen.MaxBodyBytes + 64<<10, MaxPending: 1 << 30, NoSigs: true, NoLog: true})
	if err != nil {
		return fmt.Errorf("NATS server: %w", err)
	}
	ns.Start()
	c.ns = ns
	if !ns.ReadyForConnections(10 * time.Second) {
		return errors.New("the NATS server did not start")
	}
	c.natsURL = ns.ClientURL()
	c.status("loadtest: NATS server %s", c.natsURL)
	return nil
}

func (c *Cluster) status(format string, args ...any) {
	if c.cfg.Status != nil {
		fmt.Fprintf(c.cfg.Status, format+"\n", args...)
	}
}

// NATSURL is the shared NATS server, or every node of the NATS cluster
// (comma-separated, node order); DatabaseURL the shared PostgreSQL.
func (c *Cluster) NATSURL() string { return c.natsURL }

// (with PGStandby both servers, primary first: localpg.FailoverURL).
func (c *Cluster) DatabaseURL() string { return c.dbURL }

// Dir is the cluster's temporary folder (the brokers' logs are there).
func (c *Cluster) Dir() string { return c.dir }

// HTTPURLs are the brokers' HTTP gateways, in broker order.
func (c *Cluster) HTTPURLs() []string {
	out := make([]string, len(c.brokers))
	for i, b := range c.brokers {
		out[i] = b.url
	}
	return out
}

// spawn starts b's process (not waiting for it to be ready).
func (c *Cluster) spawn(b *brokerProc) error {
	logf, err := os.OpenFile(b.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	fmt.Fprintf(logf, "=== loadtest: starting broker %d at %s\n", b.idx, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(c.cfg.Exe, "serve")
	env := append(os.Environ(), c.cfg.Env...)
	env = append(env, "DATABASE_URL="+c.dbURL, "NATS_URL="+c.natsURL, "QUEEN_HTTP_ADDR="+b.addr,
		"QUEEN_DATA_DIR="+b.dataDir, "QUEEN_LOG_LEVEL="+c.cfg.LogLevel)
	if c.cfg.Lease > 0 {
		env = append(env, "QUEEN_SHARD_LEASE="+c.cfg.Lease.String())
	}
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group (a terminal's Ctrl-C is ours to handle), killed
	// with us if we die.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start broker %d (%s serve): %w", b.idx, c.cfg.Exe, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	b.mu.Lock()
	b.cmd, b.done, b.up, b.id = cmd, done, false, ""
	b.mu.Unlock()
	return nil
}

// waitReady polls b's /health until it answers 200, then reads its broker id.
func (c *Cluster) waitReady(ctx context.Context, b *brokerProc) error {
	b.mu.Lock()
	done := b.done
	b.mu.Unlock()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		select {
		case <-done:
			return fmt.Errorf("broker %d exited while starting; its log %s ends:\n%s", b.idx, b.logPath, tail(b.logPath, 20))
		default:
		}
		if c.client(b.url).Health(ctx) == nil {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("broker %d did not answer %s/health within 2 minutes; its log: %s", b.idx, b.url, b.logPath)
		}
		if !sleep(ctx, 50*time.Millisecond) {
			return ctx.Err()
		}
	}
	v, err := c.view(b.url)
	if err != nil {
		return fmt.Errorf("broker %d: %w", b.idx, err)
	}
	b.mu.Lock()
	b.id, b.up = v.Self, true
	b.mu.Unlock()
	return nil
}

// waitOwned waits until every broker is live and every shard has a live owner.
func (c *Cluster) waitOwned(ctx context.Context, within time.Duration) error {
	deadline := time.Now().Add(within)
	var last string
	for {
		if b := c.anyUp(); b != nil {
			v, err := c.view(b.url)
			if err == nil {
				live := 0
				for _, n := range v.Brokers {
					if n.Live {
						live++
					}
				}
				own := ownerless(&v, nil)
				if live == len(c.brokers) && own == 0 && len(v.Shards) > 0 {
					return nil
				}
				last = fmt.Sprintf("%d of %d brokers live, %d of %d shards without a live owner", live, len(c.brokers), own, len(v.Shards))
			} else {
				last = err.Error()
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the cluster did not settle within %s: %s (logs in %s)", within, last, c.dir)
		}
		if !sleep(ctx, 100*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// client is the Go client of the broker at url (HTTP).
func (c *Cluster) client(url string) *client.Client {
	// The brokers inherit this environment: with QUEEN_ADMIN_TOKEN set the
	// cluster view (an admin route) wants it.
	return client.NewHTTP(client.HTTPConfig{URLs: []string{url}, Client: c.hc}, client.AdminToken(os.Getenv("QUEEN_ADMIN_TOKEN")))
}

// view reads the cluster view (GET /api/v1/cluster) from the broker at url.
func (c *Cluster) view(url string) (queen.ClusterView, error) {
	v, err := c.client(url).ClusterView(context.Background(), "")
	if err != nil {
		return v, fmt.Errorf("GET %s/api/v1/cluster: %w", url, err)
	}
	return v, nil
}

// ownerless counts the shards without a live lease, or leased by a broker
// in dead (killed, its lease not yet run out).
func ownerless(v *queen.ClusterView, dead map[string]bool) int {
	n := 0
	for _, s := range v.Shards {
		if s.Owner == "" || !s.Live || dead[s.Owner] {
			n++
		}
	}
	return n
}

// anyUp returns a broker that is up (nil when none is).
func (c *Cluster) anyUp() *brokerProc {
	for _, b := range c.brokers {
		b.mu.Lock()
		up := b.up
		b.mu.Unlock()
		if up {
			return b
		}
	}
	return nil
}

// kill sends SIGKILL to b's process group and waits for it to exit. It
// returns the broker id b had.
func (c *Cluster) kill(b *brokerProc) string {
	b.mu.Lock()
	id := b.id
	b.mu.Unlock()
	b.kill()
	return id
}

// freeze stops b's process group with SIGSTOP (chaos stop): it holds its
// connections, leases and requests in flight, answering nothing, until
// thaw. b counts as down meanwhile.
func (c *Cluster) freeze(b *brokerProc) {
	b.mu.Lock()
	cmd := b.cmd
	b.up = false
	b.mu.Unlock()
	if cmd != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGSTOP)
	}
}

// thaw resumes b's process group with SIGCONT; waitReady marks it up again.
func (c *Cluster) thaw(b *brokerProc) {
	b.mu.Lock()
	cmd := b.cmd
	b.mu.Unlock()
	if cmd != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGCONT)
	}
}

// restartPostgres restarts the shared PostgreSQL in place (chaos
// pg-restart): a fast stop, then a start on the same folder and port.
func (c *Cluster) restartPostgres(ctx context.Context) error { return c.pg.Restart(ctx) }

// canFailover reports whether a standby is there to promote.
func (c *Cluster) canFailover() bool { return c.standby != nil }

// failover kills the primary with SIGKILL (its machine lost) and promotes
// the synchronous standby (chaos pg-failover); the brokers find it through
// their multi-host DATABASE_URL. The run goes on with one server. killed is
// when the primary was gone.
func (c *Cluster) failover(ctx context.Context) (killed time.Time, err error) {
	if c.standby == nil {
		return time.Time{}, errors.New("no standby to promote")
	}
	if err := c.pg.Kill(); err != nil {
		return time.Time{}, err
	}
	killed = time.Now()
	if err := c.standby.Promote(ctx); err != nil {
		return killed, err
	}
	c.retired = append(c.retired, c.pg)
	c.pg, c.standby = c.standby, nil
	return killed, nil
}

// Close stops the brokers, the NATS server (or nodes) and PostgreSQL and removes the
// temporary folder. With keepLogs the brokers' logs are first copied to a
// folder of their own, named on Status.
func (c *Cluster) Close(keepLogs bool) error {
	var wg sync.WaitGroup
	for _, b := range c.brokers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.stop(30 * time.Second)
		}()
	}
	wg.Wait()
	if c.ns != nil {
		c.ns.Shutdown()
		c.ns.WaitForShutdown()
	}
	for _, n := range c.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n.stop(10 * time.Second)
		}()
	}
	wg.Wait()
	var err error
	for _, pg := range append([]*localpg.Cluster{c.standby, c.pg}, c.retired...) {
		if pg == nil {
			continue
		}
		if perr := pg.Stop(); perr != nil {
			c.status("loadtest: stop PostgreSQL (its folder %s is kept): %v", c.dir, perr)
			return perr
		}
		if area := pg.Dir(); area != "" && !strings.HasPrefix(area, c.dir+string(filepath.Separator)) {
			err = errors.Join(err, os.RemoveAll(area))
		}
	}
	if keepLogs && len(c.brokers)+len(c.nodes) > 0 {
		if logs, lerr := os.MkdirTemp(c.cfg.TempParent, "queen-loadtest-logs-"); lerr == nil {
			var paths []string
			for _, b := range c.brokers {
				paths = append(paths, b.logPath)
			}
			for _, n := range c.nodes {
				paths = append(paths, n.logPath)
			}
			for _, p := range paths {
				if data, rerr := os.ReadFile(p); rerr == nil {
					_ = os.WriteFile(filepath.Join(logs, filepath.Base(p)), data, 0o644)
				}
			}
			c.status("loadtest: the brokers' (and NATS nodes') logs are kept in %s", logs)
		}
	}
	err = errors.Join(err, os.RemoveAll(c.dir))
	if err == nil {
		c.status("loadtest: cluster stopped, %s removed", c.dir)
	}
	return err
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// tail returns the last n lines of the file at path.
func tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
