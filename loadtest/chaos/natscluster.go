package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/queen-mq/queen-go/loadtest/target"
	"github.com/queen-mq/queen-go/transport/client"
)

// The NATS cluster of `queen loadtest --brokers M --nats-nodes N` (SPEC.md
// §9: brokers and clients on a NATS cluster): N `queen nats-node`
// processes (ClusterConfig.Exe), each a nats-server node, clustered by
// routes on loopback. Each is a process of its own so that NATSKill's
// SIGKILL is a real crash: its sockets close, its routes drop, and the
// brokers' and clients' connections on it move to the other nodes.

// natsClusterName is the cluster name of the nodes (--cluster-name).
const natsClusterName = "queen-loadtest"

// brokerConnPrefix starts the names of a broker's NATS connections
// ("queen-broker", "queen-broker-shards"); the load's clients are named
// "queen-loadtest-...".
const brokerConnPrefix = "queen-broker"

// natsNode is one node process; a restart keeps its index and ports.
type natsNode struct {
	idx     int
	name    string // its server name, queen-nats-<idx>
	client  string // 127.0.0.1:port of the client listener
	route   string // 127.0.0.1:port of the route listener
	monitor string // 127.0.0.1:port of the HTTP monitoring endpoint
	logPath string

	proc // up: started, routed and not killed
}

// url is the node's client URL.
func (n *natsNode) url() string { return "nats://" + n.client }

func (n *natsNode) isUp() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.up
}

// natsStartTries is how many times startNATSNodes starts the nodes on new
// ports when a port it chose was taken before a node bound it.
const natsStartTries = 3

// startNATSNodes starts count node processes, each routed to every other,
// and waits until every node has a route to every other (polling their
// /routez, at most a minute). The ports are chosen free (freePort) but
// bound only by the nodes, so another process may take one in between: a
// node that exits naming a port in use makes it stop every node and start
// them again on new ports, up to natsStartTries times.
func (c *Cluster) startNATSNodes(ctx context.Context, count int) error {
	for try := 1; ; try++ {
		err := c.tryNATSNodes(ctx, count)
		if err == nil || try == natsStartTries || !c.natsPortTaken() {
			return err
		}
		c.status("loadtest: a NATS node's port was taken before it bound it; starting the NATS nodes again on new ports (try %d of %d)", try+1, natsStartTries)
		for _, n := range c.nodes {
			n.stop(10 * time.Second)
			_ = os.Remove(n.logPath)
		}
		c.nodes = nil
	}
}

// natsPortTaken reports whether a node's log says that a port it was to
// listen on was in use.
func (c *Cluster) natsPortTaken() bool {
	for _, n := range c.nodes {
		if data, err := os.ReadFile(n.logPath); err == nil && strings.Contains(string(data), "address already in use") {
			return true
		}
	}
	return false
}

// tryNATSNodes is one try of startNATSNodes.
func (c *Cluster) tryNATSNodes(ctx context.Context, count int) error {
	for i := range count {
		n := &natsNode{idx: i, name: fmt.Sprintf("queen-nats-%d", i), logPath: filepath.Join(c.dir, fmt.Sprintf("nats-%d.log", i))}
		for _, addr := range []*string{&n.client, &n.route, &n.monitor} {
			port, err := freePort()
			if err != nil {
				return err
			}
			*addr = fmt.Sprintf("127.0.0.1:%d", port)
		}
		c.nodes = append(c.nodes, n)
	}
	for _, n := range c.nodes {
		if err := c.spawnNode(n); err != nil {
			return err
		}
	}
	for _, n := range c.nodes {
		if err := c.waitRouted(ctx, n, time.Minute); err != nil {
			return err
		}
	}
	urls := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		urls[i] = n.url()
	}
	c.natsURL = strings.Join(urls, ",")
	c.status("loadtest: NATS cluster of %d node processes, routed: %s", len(c.nodes), c.natsURL)
	return nil
}

// spawnNode starts n's process (`Exe nats-node ...`), routed to every
// other node, without waiting for it.
func (c *Cluster) spawnNode(n *natsNode) error {
	logf, err := os.OpenFile(n.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	fmt.Fprintf(logf, "=== loadtest: starting NATS node %d at %s\n", n.idx, time.Now().Format(time.RFC3339Nano))
	var routes []string
	for _, o := range c.nodes {
		if o != n {
			routes = append(routes, "nats://"+o.route)
		}
	}
	args := []string{"nats-node", "--name", n.name, "--listen", n.client, "--cluster", n.route,
		"--cluster-name", natsClusterName, "--monitor", n.monitor}
	if len(routes) > 0 {
		args = append(args, "--routes", strings.Join(routes, ","))
	}
	cmd := exec.Command(c.cfg.Exe, args...)
	cmd.Env = append(os.Environ(), c.cfg.Env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// As a broker: its own process group, killed with us if we die.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start NATS node %d (%s nats-node): %w", n.idx, c.cfg.Exe, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	n.mu.Lock()
	n.cmd, n.done, n.up = cmd, done, false
	n.mu.Unlock()
	return nil
}

// routez is the part of a node's GET /routez read here.
type routez struct {
	Routes []struct {
		RemoteName string `json:"remote_name"`
	} `json:"routes"`
}

// connz is the part of a node's GET /connz read here.
type connz struct {
	Conns []struct {
		Name    string `json:"name"`
		NumSubs int    `json:"subscriptions"`
	} `json:"connections"`
}

// monitor reads GET path from n's monitoring endpoint into v.
func (c *Cluster) monitor(n *natsNode, path string, v any) error {
	resp, err := c.hc.Get("http://" + n.monitor + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s on NATS node %d answered %d: %s", path, n.idx, resp.StatusCode, target.Clip(data))
	}
	return json.Unmarshal(data, v)
}

// waitRouted waits (polling /routez every 50 ms, at most within) until n
// has a route to every other node whose process runs, and marks it up.
func (c *Cluster) waitRouted(ctx context.Context, n *natsNode, within time.Duration) error {
	n.mu.Lock()
	done := n.done
	n.mu.Unlock()
	deadline := time.Now().Add(within)
	var last string
	for {
		select {
		case <-done:
			return fmt.Errorf("NATS node %d exited while starting; its log %s ends:\n%s", n.idx, n.logPath, tail(n.logPath, 20))
		default:
		}
		var rz routez
		if err := c.monitor(n, "/routez", &rz); err == nil {
			have := map[string]bool{}
			for _, r := range rz.Routes {
				have[r.RemoteName] = true
			}
			var missing []string
			for _, o := range c.nodes {
				if o != n && o.running() && !have[o.name] {
					missing = append(missing, o.name)
				}
			}
			if len(missing) == 0 {
				n.mu.Lock()
				n.up = true
				n.mu.Unlock()
				return nil
			}
			last = "no route to " + strings.Join(missing, ", ")
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("NATS node %d not routed within %s: %s (its log: %s)", n.idx, within, last, n.logPath)
		}
		if !sleep(ctx, 50*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// running reports whether n's process runs (started, not exited).
func (n *natsNode) running() bool {
	n.mu.Lock()
	done := n.done
	n.mu.Unlock()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// brokerConns counts, over the nodes that are up, the brokers' NATS
// connections and their subscriptions (the micro service's endpoints, the
// shard subjects, the notifications), and the connections of each node.
type brokerConns struct {
	conns, subs int
	perNode     map[int][2]int // node index: [all client connections, the brokers']
}

func (c *Cluster) brokerConns() (brokerConns, error) {
	bc := brokerConns{perNode: map[int][2]int{}}
	for _, n := range c.nodes {
		if !n.isUp() {
			continue
		}
		var cz connz
		if err := c.monitor(n, "/connz?limit=100000", &cz); err != nil {
			return bc, err
		}
		brokers := 0
		for _, cn := range cz.Conns {
			if strings.HasPrefix(cn.Name, brokerConnPrefix) {
				brokers++
				bc.subs += cn.NumSubs
			}
		}
		bc.conns += brokers
		bc.perNode[n.idx] = [2]int{len(cz.Conns), brokers}
	}
	return bc, nil
}

// natsPingBudget is how long a connection may take to notice a dead server
// (client.NATSOptions): its pings' interval times the unanswered pings
// allowed plus one, 15 s. A killed node closes its sockets, so the brokers
// notice at once; their connections must be back within this budget.
const natsPingBudget = client.NATSPingInterval * (client.NATSMaxPingsOut + 1)

// waitBrokersServing polls the nodes that are up (every 50 ms, at most
// within) until they hold every broker's NATS connections, want of them,
// with at least subs subscriptions between them: every broker serves its
// NATS API and its shard subjects again.
func (c *Cluster) waitBrokersServing(ctx context.Context, want, subs int, within time.Duration) error {
	deadline := time.Now().Add(within)
	var last string
	for {
		bc, err := c.brokerConns()
		if err == nil && bc.conns >= want && bc.subs >= subs {
			return nil
		}
		if err != nil {
			last = err.Error()
		} else {
			last = fmt.Sprintf("%d of %d broker connections with %d of %d subscriptions", bc.conns, want, bc.subs, subs)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the brokers' NATS connections were not back within %s: %s", within, last)
		}
		if !sleep(ctx, 50*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// NATSNodes is the number of NATS node processes (0: one NATS server in
// this process).
func (c *Cluster) NATSNodes() int { return len(c.nodes) }

// natsKill runs one nats-kill (NATSKill) to its end: it counts the
// brokers' NATS connections and subscriptions on the nodes, SIGKILLs the
// next node in turn that holds a broker connection (the next in turn when
// none does; the brokers' connections pick their nodes at random), waits until the other nodes hold every broker
// connection again with at least those subscriptions (ev.serving; at most
// natsPingBudget, else the fault's error), keeps the node down until
// ev.pause after the kill, restarts it on the same ports and waits until
// it is routed to every other node again.
func (r *Run) natsKill(ctx context.Context, ev *faultEvent) error {
	c := r.c
	want, subs := 2*len(c.brokers), 0
	before, err := c.brokerConns()
	if err == nil {
		want, subs = before.conns, before.subs
	}
	n := c.nodes[r.natsNext%len(c.nodes)]
	for k := range c.nodes {
		if o := c.nodes[(r.natsNext+k)%len(c.nodes)]; before.perNode[o.idx][1] > 0 {
			n = o
			break
		}
	}
	r.natsNext = n.idx + 1
	r.mu.Lock()
	ev.node = n.name
	ev.nodeConns, ev.brokerConns = before.perNode[n.idx][0], before.perNode[n.idx][1]
	r.mu.Unlock()
	n.kill()
	r.status("loadtest: chaos: killed NATS node %d (%s, %d connections, %d of the brokers') at %.1fs",
		n.idx, n.name, ev.nodeConns, ev.brokerConns, ev.at.Seconds())
	serr := c.waitBrokersServing(ctx, want, subs, natsPingBudget)
	if serr == nil {
		r.mu.Lock()
		ev.serving = time.Since(r.start)
		r.mu.Unlock()
		r.status("loadtest: chaos: every broker's NATS connections back (%d, %d subscriptions) %.1fs after the kill",
			want, subs, (ev.serving - ev.at).Seconds())
	}
	sleep(ctx, time.Until(r.start.Add(ev.at+ev.pause)))
	if err := c.spawnNode(n); err != nil {
		return errors.Join(serr, err)
	}
	return errors.Join(serr, c.waitRouted(ctx, n, time.Minute))
}
