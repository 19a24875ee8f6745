package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/queen-mq/queen-go/loadtest/chaos"
	"github.com/queen-mq/queen-go/loadtest/report"
)

// TestLoadtestClusterChaos: `queen loadtest --brokers 2 --chaos kill` starts
// two broker processes (this test binary, re-executed as `queen serve`) on
// one managed PostgreSQL and one NATS server, kills one with SIGKILL and
// restarts it, and the audits still pass; nothing is left behind.
func TestLoadtestClusterChaos(t *testing.T) {
	t.Parallel()
	c := startChild(t, "--brokers", "2", "--chaos", "kill", "--shard-lease", "1s", "--chaos-interval", "3s",
		"--duration", "7s", "--json", "--producers", "2", "--partitions", "8", "--batch", "20",
		"--consumers", "1", "--consume-lease", "5", "--wake-probes", "2", "--target", "http://brokers")
	line := c.waitLine(t, "loadtest: cluster folder ")
	rep := passedRun(t, c)
	require.False(t, rep.Interrupted)
	require.Positive(t, rep.StoredMessages)

	cl := rep.Cluster
	require.NotNil(t, cl)
	require.Equal(t, 2, cl.Brokers)
	require.Len(t, cl.BrokerURLs, 2)
	require.Equal(t, 1.0, cl.ShardLeaseSeconds)
	require.Positive(t, cl.ClusterPolls)
	require.Positive(t, cl.Client.Requests)
	ch := requireChaos(t, &rep, chaos.Kill)
	require.GreaterOrEqual(t, ch.Kills, 1)
	require.Equal(t, ch.Kills, ch.Faults)

	// The temporary folder (PostgreSQL, logs) is gone, and so are the brokers.
	left, err := os.ReadDir(c.tmp)
	require.NoError(t, err)
	require.Empty(t, left, "the temporary folder is removed (%s)", line)
	require.Empty(t, postgresIn(c.tmp), "no PostgreSQL process of the cluster remains")
	dir := strings.TrimSpace(strings.TrimPrefix(line[strings.Index(line, "loadtest: "):], "loadtest: cluster folder "))
	require.Empty(t, processesWithEnv("QUEEN_DATA_DIR="+dir), "no broker process remains")
}

// requireChaos checks the report's chaos section of a run in mode: at
// least one fault, each recovered, counted by kind, with the clients' view
// around it.
func requireChaos(t *testing.T, rep *report.Report, mode string) *report.ChaosReport {
	t.Helper()
	ch := rep.Chaos
	require.NotNil(t, ch, "the report has a chaos section")
	require.Equal(t, mode, ch.Mode)
	require.NotZero(t, ch.Seed)
	require.Positive(t, ch.Faults)
	require.Equal(t, ch.Faults, ch.Kills+ch.Stops+ch.PGRestarts+ch.PGFailovers+ch.NATSKills)
	require.Equal(t, ch.Faults, ch.Recovered, "every fault recovered: %+v", ch.Events)
	require.Len(t, ch.Events, ch.Faults)
	for _, e := range ch.Events {
		require.Empty(t, e.Error)
		require.Positive(t, e.RecoveredAfterSeconds, "%+v", e)
	}
	require.Positive(t, ch.During.Requests+ch.After.Requests+ch.Steady.Requests)
	return ch
}

// TestLoadtestClusterChaosStop: `--chaos stop` freezes a broker with
// SIGSTOP and resumes it with SIGCONT; the audits pass and the stops are
// counted.
func TestLoadtestClusterChaosStop(t *testing.T) {
	t.Parallel()
	c := startChild(t, "--brokers", "2", "--chaos", "stop", "--shard-lease", "1s", "--chaos-interval", "3s", "--chaos-pause", "1500ms",
		"--duration", "7s", "--json", "--producers", "2", "--partitions", "8", "--batch", "20",
		"--consumers", "1", "--consume-lease", "5", "--wake-probes", "2")
	line := c.waitLine(t, "loadtest: cluster folder ")
	rep := passedRun(t, c)
	require.NotNil(t, rep.Cluster)
	ch := requireChaos(t, &rep, chaos.Stop)
	require.Equal(t, ch.Faults, ch.Stops)
	require.Equal(t, 1.5, ch.StopPauseSeconds)
	for _, e := range ch.Events {
		require.Equal(t, report.FaultStop, e.Kind)
		require.GreaterOrEqual(t, e.RecoveredAfterSeconds, 1.5, "recovered only after SIGCONT: %+v", e)
	}
	dir := strings.TrimSpace(strings.TrimPrefix(line[strings.Index(line, "loadtest: "):], "loadtest: cluster folder "))
	require.Empty(t, processesWithEnv("QUEEN_DATA_DIR="+dir), "no broker process remains")
}

// TestLoadtestClusterPGFailover (SPEC.md §9): `--brokers 2 --pg-standby
// --chaos pg-failover` SIGKILLs the PostgreSQL primary under pushes and
// acks and promotes its synchronous standby; the brokers find it through
// their multi-host DATABASE_URL by themselves, every message answered
// queued is in the promoted database once (the audit reads it), the
// consumers' cursors are intact (the consume audit), and nothing is left
// behind.
func TestLoadtestClusterPGFailover(t *testing.T) {
	t.Parallel()
	c := startChild(t, "--brokers", "2", "--pg-standby", "--chaos", "pg-failover", "--shard-lease", "1s", "--chaos-interval", "4s",
		"--duration", "8s", "--json", "--producers", "2", "--partitions", "8", "--batch", "20",
		"--consumers", "1", "--consume-lease", "5", "--wake-probes", "2")
	line := c.waitLine(t, "loadtest: cluster folder ")
	rep := passedRun(t, c)
	require.Positive(t, rep.StoredMessages)
	ch := requireChaos(t, &rep, chaos.PGFailover)
	require.Equal(t, 1, ch.PGFailovers, "once per run: one server is left after it")
	require.Equal(t, 1, ch.Faults)
	require.Equal(t, 1, ch.Recovered, "every broker healthy on the promoted standby: %+v", ch.Events)
	require.Contains(t, c.stderr.String(), "synchronous PostgreSQL standby in ")
	left, err := os.ReadDir(c.tmp)
	require.NoError(t, err)
	require.Empty(t, left, "the temporary folder is removed (%s)", line)
}

// TestLoadtestEmbeddedChaosPGRestart: `--embedded --chaos pg-restart`
// restarts the embedded broker's PostgreSQL under load; the broker
// recovers, the failed items are retried with their transactionIds, the
// audits pass, and the restarts are counted.
func TestLoadtestEmbeddedChaosPGRestart(t *testing.T) {
	t.Parallel()
	c := startChild(t, "--embedded", "--chaos", "pg-restart", "--chaos-interval", "3s",
		"--duration", "7s", "--json", "--producers", "2", "--partitions", "8", "--batch", "20",
		"--consumers", "1", "--consume-lease", "5", "--wake-probes", "2")
	cl := c.cluster(t)
	rep := passedRun(t, c)
	require.Nil(t, rep.Cluster, "no cluster of brokers")
	ch := requireChaos(t, &rep, chaos.PGRestart)
	require.Equal(t, ch.Faults, ch.PGRestarts)
	for _, e := range ch.Events {
		require.Equal(t, report.FaultPGRestart, e.Kind)
		require.Equal(t, -1, e.Broker)
	}
	c.requireCleanedUp(t, cl)
}

// processesWithEnv lists live processes whose environment has an entry
// starting with prefix.
func processesWithEnv(prefix string) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || !alive(pid) {
			continue
		}
		env, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		for _, kv := range bytes.Split(env, []byte{0}) {
			if bytes.HasPrefix(kv, []byte(prefix)) {
				out = append(out, pid)
				break
			}
		}
	}
	return out
}

func TestLoadtestClusterFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--brokers", "2", "--chaos", "kill", "--chaos-interval", "5s"}, "at least twice the shard lease"},
		{[]string{"--chaos", "kill", "--embedded"}, "--chaos kill needs brokers of its own"},
		{[]string{"--chaos", "stop", "--embedded"}, "--chaos stop needs brokers of its own"},
		{[]string{"--chaos", "mixed"}, "--chaos mixed needs brokers of its own"},
		{[]string{"--chaos", "pg-restart"}, "pass --brokers N or --embedded"},
		{[]string{"--chaos", "pg-restart", "--embedded", "--compare"}, "pass --brokers N or --embedded"},
		{[]string{"--brokers", "2", "--chaos", "stop", "--chaos-interval", "10s", "--chaos-pause", "10s"}, "want less than the chaos interval"},
		{[]string{"--brokers", "2", "--embedded"}, "drop --embedded"},
		{[]string{"--brokers", "2", "--chaos", "nats-kill"}, "--chaos nats-kill kills a node of a NATS cluster and needs at least 2 (--nats-nodes 0)"},
		{[]string{"--brokers", "2", "--nats-nodes", "1", "--chaos", "nats-kill"}, "needs at least 2 (--nats-nodes 1)"},
		{[]string{"--chaos", "nats-kill", "--embedded"}, "pass --brokers N --nats-nodes M"},
		{[]string{"--nats-nodes", "3"}, "--nats-nodes gives the brokers of --brokers N a NATS cluster"},
		{[]string{"--brokers", "2", "--nats-nodes", "10"}, "--nats-nodes 10: want 0"},
	} {
		cmd := loadtestCmd()
		cmd.SetArgs(tc.args)
		cmd.SetOut(&discard{})
		cmd.SetErr(&discard{})
		require.ErrorContains(t, cmd.Execute(), tc.want, "%v", tc.args)
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// TestLoadtestClusterNATSKill (SPEC.md §9): `--brokers 2 --nats-nodes 3
// --chaos nats-kill` runs the NATS server as three `queen nats-node`
// processes (this test binary, re-executed) and SIGKILLs nodes under
// pushes, pops and acks, restarting each on its ports. Every request is
// answered or times out (the clients' errors are only retryable codes, and
// every item gets a verdict), the retries with the same transactionIds
// stay exact (the audits), the brokers' NATS connections on a killed node
// are back on the others with their subscriptions within the 15 s ping
// budget (the harness polls the nodes' /connz with that deadline; a miss
// is the fault's recovery error), the killed node rejoins, and no node
// process is left behind.
func TestLoadtestClusterNATSKill(t *testing.T) {
	t.Parallel()
	c := startChild(t, "--brokers", "2", "--nats-nodes", "3", "--chaos", "nats-kill", "--shard-lease", "1s",
		"--chaos-interval", "4s", "--chaos-pause", "1500ms", "--duration", "8s", "--json", "--producers", "3",
		"--partitions", "8", "--batch", "20", "--consumers", "2", "--consume-lease", "5", "--wake-probes", "2")
	line := c.waitLine(t, "loadtest: cluster folder ")
	rep := passedRun(t, c)
	require.Positive(t, rep.StoredMessages)
	require.NotNil(t, rep.Cluster)
	require.Equal(t, 3, rep.Cluster.NATSNodes)
	require.Len(t, strings.Split(rep.Cluster.NATSURL, ","), 3)

	ch := requireChaos(t, &rep, chaos.NATSKill)
	require.Equal(t, ch.Faults, ch.NATSKills)
	require.Equal(t, 1.5, ch.NATSKillPauseSeconds)
	for _, e := range ch.Events {
		require.Equal(t, report.FaultNATSKill, e.Kind)
		require.Equal(t, -1, e.Broker)
		require.True(t, strings.HasPrefix(e.NATSNode, "queen-nats-"), "%+v", e)
		require.Positive(t, e.BrokerConnections, "the killed node held a broker connection: %+v", e)
		require.Positive(t, e.ServingAfterSeconds, "the brokers' connections came back: %+v", e)
		require.GreaterOrEqual(t, e.RecoveredAfterSeconds, 1.5, "recovered once the node was restarted and routed: %+v", e)
		require.Equal(t, e.RecoveredAfterSeconds, e.RejoinedAfterSeconds)
		t.Logf("nats-kill of %s at %.1f s (%d connections, %d of the brokers'): brokers serving after %.2f s, rejoined after %.1f s; clients during: %d errors %v",
			e.NATSNode, e.AtSeconds, e.NodeConnections, e.BrokerConnections, e.ServingAfterSeconds, e.RejoinedAfterSeconds, e.During.Errors, e.During.ByKind)
	}
	// Answered or timed out: what the clients saw were retryable codes.
	for kind := range ch.During.ByKind {
		requireRetryableKind(t, kind)
	}
	for kind := range ch.After.ByKind {
		requireRetryableKind(t, kind)
	}
	for kind := range ch.Steady.ByKind {
		requireRetryableKind(t, kind)
	}
	require.Contains(t, c.stderr.String(), "NATS cluster of 3 node processes, routed")

	left, err := os.ReadDir(c.tmp)
	require.NoError(t, err)
	require.Empty(t, left, "the temporary folder is removed (%s)", line)
	dir := strings.TrimSpace(strings.TrimPrefix(line[strings.Index(line, "loadtest: "):], "loadtest: cluster folder "))
	require.Empty(t, processesWithEnv("QUEEN_DATA_DIR="+dir), "no broker process remains")
	for _, u := range strings.Split(rep.Cluster.NATSURL, ",") {
		require.Empty(t, processesWithArgs("nats-node", strings.TrimPrefix(u, "nats://")), "no NATS node process remains (%s)", u)
	}
}

// requireRetryableKind checks a client error kind ("push:timeout",
// "push:failed:unavailable", "pop:timeout", ...) names a code a client
// retries: the request timed out or was answered with a retryable error.
func requireRetryableKind(t *testing.T, kind string) {
	t.Helper()
	code := kind[strings.LastIndex(kind, ":")+1:]
	switch code {
	case "timeout", "unavailable", "commit_unknown", "overloaded", "lock_timeout", "nats_unavailable", "storage_full":
	default:
		t.Fatalf("client error %q: want a timeout or a retryable answer", kind)
	}
}

// processesWithArgs lists live processes whose command line has every one
// of args among its arguments (or inside one of them).
func processesWithArgs(args ...string) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || !alive(pid) {
			continue
		}
		cl, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		all := true
		for _, a := range args {
			if !bytes.Contains(cl, []byte(a)) {
				all = false
				break
			}
		}
		if all {
			out = append(out, pid)
		}
	}
	return out
}

// passedRun waits for c, a load run with consumers, to exit 0 and returns
// its JSON report, after checking that both audits passed and that every
// item got a verdict.
func passedRun(t *testing.T, c *child) report.Report {
	t.Helper()
	code := c.wait(t)
	var rep report.Report
	decoded := json.Unmarshal(c.stdout.Bytes(), &rep)
	if code != 0 && decoded == nil {
		// The findings are in the report: name them.
		var push, consume []string
		if rep.Audit != nil {
			push = rep.Audit.Examples
		}
		if rep.Consume != nil && rep.Consume.Audit != nil {
			consume = rep.Consume.Audit.Examples
		}
		require.Equal(t, 0, code, "stderr:\n%s\naudit: %v\nconsume audit: %v", c.stderr.String(), push, consume)
	}
	require.Equal(t, 0, code, "stderr:\n%s", c.stderr.String())
	require.NoError(t, decoded, "stdout is one JSON object: %s", c.stdout.String())
	require.True(t, rep.Audit.Passed, "%v", rep.Audit.Examples)
	require.Zero(t, rep.GaveUp, "every item got a verdict")
	require.NotNil(t, rep.Consume)
	require.True(t, rep.Consume.Audit.Passed, "%v", rep.Consume.Audit.Examples)
	return rep
}
