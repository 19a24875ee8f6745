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

	"github.com/queen-mq/queen-go/loadtest"
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
	require.Equal(t, 0, c.wait(t), "stderr:\n%s", c.stderr.String())
	var rep loadtest.Report
	require.NoError(t, json.Unmarshal(c.stdout.Bytes(), &rep), "stdout is one JSON object: %s", c.stdout.String())
	require.False(t, rep.Interrupted)
	require.True(t, rep.Audit.Passed, "%v", rep.Audit.Examples)
	require.Positive(t, rep.StoredMessages)
	require.Zero(t, rep.GaveUp, "every item got a verdict")
	require.NotNil(t, rep.Consume)
	require.True(t, rep.Consume.Audit.Passed, "%v", rep.Consume.Audit.Examples)

	cl := rep.Cluster
	require.NotNil(t, cl)
	require.Equal(t, 2, cl.Brokers)
	require.Len(t, cl.BrokerURLs, 2)
	require.Equal(t, loadtest.ChaosKill, cl.Chaos)
	require.Equal(t, 1.0, cl.ShardLeaseSeconds)
	require.GreaterOrEqual(t, cl.Kills, 1)
	require.Equal(t, cl.Kills, cl.Restarts, "every killed broker came back: %+v", cl.Events)
	require.Positive(t, cl.ClusterPolls)
	require.Positive(t, cl.Client.Requests)
	require.Len(t, cl.Events, cl.Kills)

	// The temporary folder (PostgreSQL, logs) is gone, and so are the brokers.
	left, err := os.ReadDir(c.tmp)
	require.NoError(t, err)
	require.Empty(t, left, "the temporary folder is removed (%s)", line)
	require.Empty(t, postgresIn(c.tmp), "no PostgreSQL process of the cluster remains")
	dir := strings.TrimSpace(strings.TrimPrefix(line[strings.Index(line, "loadtest: "):], "loadtest: cluster folder "))
	require.Empty(t, processesWithEnv("QUEEN_DATA_DIR="+dir), "no broker process remains")
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
		{[]string{"--chaos", "kill", "--embedded"}, "--chaos needs brokers of its own"},
		{[]string{"--brokers", "2", "--embedded"}, "drop --embedded"},
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
