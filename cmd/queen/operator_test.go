package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/cmd/queen/internal/broker"
	"github.com/queen-mq/queen-go/persistence"
	"github.com/queen-mq/queen-go/persistence/pgtest"
	"github.com/queen-mq/queen-go/transport/wire"
)

const testToken = "op-s3cret"

// startTokenBroker starts a broker whose admin routes want testToken.
func startTokenBroker(t *testing.T) *broker.Broker {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := broker.Start(ctx, broker.Config{
		DatabaseURL: pgtest.NewDatabase(t), HTTPAddr: "127.0.0.1:0", NATSListen: "127.0.0.1:0",
		DataDir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), AdminToken: testToken,
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		require.NoError(t, b.Stop(ctx))
	})
	return b
}

// runOp runs `queen args...` in process with the operator verbs and returns
// standard output and the exit code main would give.
func runOp(t *testing.T, args ...string) (string, int, error) {
	t.Helper()
	root := &cobra.Command{Use: "queen", SilenceUsage: true, SilenceErrors: true}
	root.AddCommand(queuesCmd(), dedupCmd(), dlqCmd(), clusterCmd(), whoamiCmd())
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(io.Discard)
	root.SetArgs(args)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := root.ExecuteContext(ctx)
	return out.String(), exitCode(err), err
}

// httpJSON sends a request to the broker and decodes a JSON reply into v.
func httpJSON(t *testing.T, method, u, auth string, body any, v any) int {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		require.NoError(t, err)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, u, rd)
	require.NoError(t, err)
	if auth != "" {
		req.Header.Set("Authorization", "Bearer "+auth)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	if v != nil && len(b) > 0 {
		require.NoError(t, json.Unmarshal(b, v), "%s %s: %s", method, u, b)
	}
	return resp.StatusCode
}

// TestOperatorVerbs runs queen queues, dedup, dlq list|replay and cluster
// against a real broker whose admin routes want a token: their output (table
// and json) and exit codes.
func TestOperatorVerbs(t *testing.T) {
	b := startTokenBroker(t)
	base := b.HTTPURL()
	t.Setenv("QUEEN_HTTP_ADDR", "")
	t.Setenv("QUEEN_ADMIN_TOKEN", "")
	var pushed []wire.PushReply
	require.Equal(t, http.StatusCreated, httpJSON(t, http.MethodPost, base+"/api/v1/push", "", map[string]any{"items": []any{
		map[string]any{"queue": "cq", "partition": "p", "transactionId": "k1"},
		map[string]any{"queue": "cq", "partition": "d", "transactionId": "poison", "payload": map[string]any{"n": 7}},
	}}, &pushed))
	s := []string{"--server", base, "--token", testToken}

	// queen queues: the list, one queue, json, an unknown queue.
	out, code, err := runOp(t, append([]string{"queues"}, s...)...)
	require.NoError(t, err)
	require.Equal(t, 0, code)
	require.Contains(t, out, "QUEUE")
	require.Regexp(t, `(?m)^cq\s+2\s+2\s+2\s+3600\s`, out)
	out, code, _ = runOp(t, append([]string{"queues", "cq", "-o", "json"}, s...)...)
	require.Equal(t, 0, code)
	var qi queen.QueueInfo
	require.NoError(t, json.Unmarshal([]byte(out), &qi), out)
	require.Equal(t, "cq", qi.Name)
	require.EqualValues(t, 2, qi.Partitions)
	out, code, _ = runOp(t, append([]string{"queues", "cq"}, s...)...)
	require.Equal(t, 0, code)
	require.Regexp(t, `(?m)^dedupWindowSeconds\s+3600$`, out)
	_, code, err = runOp(t, append([]string{"queues", "nope"}, s...)...)
	require.Equal(t, exitError, code)
	require.ErrorContains(t, err, "404 not_found")

	// queen dedup: in_window (0), unknown (4), expired (3: a window of 0).
	out, code, err = runOp(t, append([]string{"dedup", "cq", "p", "k1"}, s...)...)
	require.NoError(t, err)
	require.Equal(t, 0, code)
	require.Regexp(t, `(?m)^state\s+in_window$`, out)
	require.Regexp(t, `(?m)^messageId\s+`+pushed[0].MessageID+`$`, out)
	require.Regexp(t, `(?m)^windowClosesAt\s+\d{4}-`, out)
	out, code, _ = runOp(t, append([]string{"dedup", "cq", "p", "never", "-o", "json"}, s...)...)
	require.Equal(t, exitUnknown, code)
	require.JSONEq(t, `{"state":"unknown","messageId":null,"offset":null,"createdAt":null,"windowSeconds":3600,"windowClosesAt":null}`, out)
	_, code, _ = runOp(t, append([]string{"dedup", "cq", "nope", "k1"}, s...)...)
	require.Equal(t, exitError, code, "an unknown partition is an error")
	// Turning an existing queue's window off needs the admin token (issue 29).
	require.Equal(t, http.StatusUnauthorized, httpJSON(t, http.MethodPost, base+"/api/v1/configure", "", map[string]any{"queue": "cq", "options": map[string]any{"dedupWindowSeconds": 0}}, nil))
	require.Equal(t, http.StatusOK, httpJSON(t, http.MethodPost, base+"/api/v1/configure", testToken, map[string]any{"queue": "cq", "options": map[string]any{"dedupWindowSeconds": 0}}, nil))
	out, code, _ = runOp(t, append([]string{"dedup", "cq", "p", "k1"}, s...)...)
	require.Equal(t, exitExpired, code)
	require.Regexp(t, `(?m)^state\s+expired$`, out)

	// Usage errors (2), before anything is sent.
	for _, bad := range [][]string{
		{"dedup", "cq", "p"},
		{"dedup", "cq", "p", "k1", "-o", "yaml"},
		{"dedup", "cq", "p", "k1", "--bogus"},
		{"queues", "a", "b"},
		{"cluster", "extra"},
		{"whoami", "extra"},
		{"dlq"},
		{"dlq", "frobnicate"},
		{"dlq", "list"},
		{"dlq", "replay", "cq", "--id", "1"},
		{"dlq", "replay", "cq", "--group", "g"},
		{"dlq", "replay", "cq", "--group", "g", "--id", "1", "--partition", "d"},
		{"dlq", "replay", "cq", "--group", "g", "--id", "x"},
	} {
		_, code, err := runOp(t, append(bad, s...)...)
		require.Equal(t, exitUsage, code, "%v: %v", bad, err)
	}

	// The token: from --token, or QUEEN_ADMIN_TOKEN; without it, 401 (exit 1).
	_, code, err = runOp(t, "cluster", "--server", base)
	require.Equal(t, exitError, code)
	require.ErrorContains(t, err, "401 unauthorized")
	_, code, err = runOp(t, "whoami", "--server", base)
	require.Equal(t, exitError, code)
	require.ErrorContains(t, err, "whoami: 401 unauthorized")
	out, code, err = runOp(t, "whoami", "--server", base, "--token", testToken)
	require.NoError(t, err)
	require.Equal(t, 0, code)
	require.Regexp(t, `(?m)^access\s+admin-token$`, out)
	require.Regexp(t, `(?m)^role\s+admin$`, out)
	t.Setenv("QUEEN_ADMIN_TOKEN", testToken)
	out, code, err = runOp(t, "cluster", "--server", base)
	require.NoError(t, err)
	require.Equal(t, 0, code)
	require.Contains(t, out, "BROKER")
	require.Contains(t, out, base)
	require.Regexp(t, `\s0-63\n`, out, "the only broker owns every shard")
	require.Regexp(t, `\s`+regexp.QuoteMeta(broker.Release)+`\s+unknown\s+`+strconv.Itoa(persistence.SchemaVersion())+`\s+`+strconv.Itoa(persistence.LayoutGeneration())+`\s+0-63\n`, out,
		"release, revision, schema version and layout generation")
	out, _, _ = runOp(t, "cluster", "--server", base, "-o", "json")
	var cv queen.ClusterView
	require.NoError(t, json.Unmarshal([]byte(out), &cv), out)
	require.Len(t, cv.Brokers, 1)
	require.Equal(t, queen.Build{Release: broker.Release, Revision: "unknown", Schema: persistence.SchemaVersion(), Layout: persistence.LayoutGeneration()}, cv.Brokers[0].Build, out)

	// queen dlq list, then replay: moved, then gone; a replay already in the
	// window is a duplicate.
	var pop queen.PopResult
	require.Equal(t, http.StatusOK, httpJSON(t, http.MethodGet, base+"/api/v1/pop/queue/cq/partition/d?consumerGroup=g", "", nil, &pop))
	require.Len(t, pop.Messages, 1)
	m := pop.Messages[0]
	var acks []queen.AckResult
	require.Equal(t, http.StatusOK, httpJSON(t, http.MethodPost, base+"/api/v1/ack/batch", "", map[string]any{"consumerGroup": "g", "acknowledgments": []any{
		map[string]any{"transactionId": m.TransactionID, "partitionId": m.PartitionID, "leaseId": *m.LeaseID, "status": "dlq", "error": "bad\npayload"},
	}}, &acks))
	require.Equal(t, queen.DeadLettered, acks[0].Result)
	out, code, _ = runOp(t, append([]string{"dlq", "list", "cq", "--group", "g"}, s...)...)
	require.Equal(t, 0, code)
	require.Regexp(t, `(?m)^\d+\s+g\s+d\s+0\s+1\s+\S+\s+poison\s+bad payload$`, out)
	out, code, _ = runOp(t, append([]string{"dlq", "list", "cq", "-o", "json"}, s...)...)
	require.Equal(t, 0, code)
	var l struct {
		Messages []queen.DeadLetter `json:"messages"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &l), out)
	require.Len(t, l.Messages, 1)
	id := strconv.FormatInt(l.Messages[0].ID, 10)
	out, code, err = runOp(t, append([]string{"dlq", "replay", "cq", "--group", "g", "--id", id}, s...)...)
	require.NoError(t, err)
	require.Equal(t, 0, code)
	require.Regexp(t, `(?m)^`+id+`\s+moved\s+d\s+dlq:`+id+`\s+\S+`, out)
	out, code, _ = runOp(t, append([]string{"dlq", "replay", "cq", "--group", "g", "--id", id, "-o", "json"}, s...)...)
	require.Equal(t, 0, code)
	require.Contains(t, out, `"result":"gone"`)
	_, code, _ = runOp(t, append([]string{"dlq", "replay", "nope", "--group", "g", "--partition", "d"}, s...)...)
	require.Equal(t, exitError, code)
}

// TestOperatorExitCodesFromTheBinary: the process itself exits with the
// documented codes (main maps them), printing nothing for dedup's 3 and 4.
func TestOperatorExitCodesFromTheBinary(t *testing.T) {
	b := startTokenBroker(t)
	require.Equal(t, http.StatusCreated, httpJSON(t, http.MethodPost, b.HTTPURL()+"/api/v1/push", "", map[string]any{"items": []any{
		map[string]any{"queue": "bq", "partition": "p", "transactionId": "k1"},
	}}, nil))
	for _, c := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"dedup", "bq", "p", "k1"}, 0, ""},
		{[]string{"dedup", "bq", "p", "unknown-id"}, exitUnknown, ""},
		{[]string{"dedup", "bq", "p"}, exitUsage, "accepts 3 arg(s)"},
		{[]string{"dedup", "nope", "p", "k1"}, exitError, "404 not_found"},
	} {
		cmd := exec.Command(os.Args[0], append(c.args, "--server", b.HTTPURL())...)
		cmd.Env = append(os.Environ(), runMainEnv+"=1", "QUEEN_ADMIN_TOKEN="+testToken)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else {
			require.NoError(t, err)
		}
		require.Equal(t, c.code, code, "%v: stderr %s", c.args, stderr.String())
		if c.stderr == "" {
			require.Empty(t, strings.TrimSpace(stderr.String()), "%v", c.args)
		} else {
			require.Contains(t, stderr.String(), c.stderr, "%v", c.args)
		}
	}
}
