package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/transport/wire"
)

// syncBuffer is an io.Writer read while a command writes to it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// waitOutput polls out until cond holds (30 s), failing with the output.
func waitOutput(t *testing.T, what string, out fmt.Stringer, cond func(string) bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		s := out.String()
		if cond(s) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not seen within 30 s; output so far:\n%s", what, s)
		}
		time.Sleep(20 * time.Millisecond) // a poll interval, not a wait for an event
	}
}

// pushItems pushes (partition, transactionId) pairs to queue and returns the
// replies.
func pushItems(t *testing.T, base, queue string, pairs ...string) []wire.PushReply {
	t.Helper()
	var its []any
	for i := 0; i+1 < len(pairs); i += 2 {
		its = append(its, map[string]any{"queue": queue, "partition": pairs[i], "transactionId": pairs[i+1], "payload": map[string]any{"txn": pairs[i+1]}})
	}
	var out []wire.PushReply
	require.Equal(t, http.StatusCreated, httpJSON(t, http.MethodPost, base+"/api/v1/push", "", map[string]any{"items": its}, &out))
	return out
}

// jsonLines decodes `queen tail -o json` output.
func jsonLines(t *testing.T, out string) []tailLine {
	t.Helper()
	var ls []tailLine
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if l == "" {
			continue
		}
		var x tailLine
		require.NoError(t, json.Unmarshal([]byte(l), &x), l)
		ls = append(ls, x)
	}
	return ls
}

// TestTail runs queen tail against a real broker (whose admin routes want a
// token): the last messages of a partition and of a queue, -o json, --group,
// the exit codes; then --follow prints messages pushed after it started
// (in a new partition too), each once, and ends cleanly when its context is
// canceled (Ctrl-C).
func TestTail(t *testing.T) {
	b := startTokenBroker(t)
	base := b.HTTPURL()
	t.Setenv("QUEEN_HTTP_ADDR", "")
	t.Setenv("QUEEN_ADMIN_TOKEN", "")
	s := []string{"--server", base, "--token", testToken}
	var pairs []string
	for i := range 12 {
		pairs = append(pairs, "p", fmt.Sprintf("t%02d", i))
	}
	pushed := pushItems(t, base, "tq", pairs[:12]...)
	pushed = append(pushed, pushItems(t, base, "tq", pairs[12:]...)...)
	pushItems(t, base, "tq", "o", "o-1")

	tail := func(args ...string) (string, int, error) {
		return runTail(t, context.Background(), nil, append(append([]string{"tail"}, args...), s...)...)
	}
	// The last 10 of one partition, oldest first, with a header.
	out, code, err := tail("tq", "--partition", "p")
	require.NoError(t, err)
	require.Equal(t, 0, code)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 11, out)
	require.Regexp(t, `^PARTITION\s+OFFSET\s+CREATED\s+MESSAGE ID\s+TRANSACTION ID\s+PAYLOAD$`, lines[0])
	for i, l := range lines[1:] {
		off := i + 2
		require.Regexp(t, fmt.Sprintf(`^p\s+%d\s+\d{4}-\d\d-\d\dT\S+Z\s+%s\s+t%02d\s+\{"txn":"t%02d"\}$`, off, pushed[off].MessageID, off, off), l)
	}
	// -n and -o json: one object per line.
	out, code, _ = tail("tq", "--partition", "p", "-n", "3", "-o", "json")
	require.Equal(t, 0, code)
	js := jsonLines(t, out)
	require.Len(t, js, 3)
	for i, x := range js {
		require.Equal(t, "tq", x.Queue)
		require.EqualValues(t, 9+i, x.Offset)
		require.Equal(t, pushed[9+i].MessageID, x.ID)
		require.JSONEq(t, fmt.Sprintf(`{"txn":"t%02d"}`, 9+i), string(x.Data))
		require.Nil(t, x.Cursor)
	}
	// Every partition: the newest across them.
	out, code, _ = tail("tq", "-n", "20", "-o", "json")
	require.Equal(t, 0, code)
	js = jsonLines(t, out)
	require.Len(t, js, 13)
	require.Equal(t, "o-1", js[12].TransactionID, "the newest message comes last")
	// --group shows the group's cursor and lag; nothing is consumed.
	var pop queen.PopResult
	require.Equal(t, http.StatusOK, httpJSON(t, http.MethodGet, base+"/api/v1/pop/queue/tq/partition/p?consumerGroup=g&batch=5&autoAck=true", "", nil, &pop))
	require.Len(t, pop.Messages, 5)
	out, code, _ = tail("tq", "--partition", "p", "--group", "g", "-n", "12")
	require.Equal(t, 0, code)
	require.Contains(t, out, "# group g partition p: cursor 4, lag 7\n")
	require.Regexp(t, `(?m)^p\s+4\s+done\s`, out)
	require.Regexp(t, `(?m)^p\s+5\s+pending\s`, out)
	out, _, _ = tail("tq", "--group", "g", "-n", "1", "-o", "json")
	js = jsonLines(t, out)
	require.Len(t, js, 1)
	require.Equal(t, "o", js[0].Partition)
	require.Nil(t, js[0].Cursor, "g has not popped partition o")
	out, _, _ = tail("tq", "--partition", "p", "--group", "g", "-n", "1", "-o", "json")
	js = jsonLines(t, out)
	require.Len(t, js, 1)
	require.EqualValues(t, 4, *js[0].Cursor)
	require.EqualValues(t, 7, *js[0].Lag)
	require.False(t, *js[0].Consumed)
	// The group's next pop still starts at offset 5: tail consumed nothing.
	require.Equal(t, http.StatusOK, httpJSON(t, http.MethodGet, base+"/api/v1/pop/queue/tq/partition/p?consumerGroup=g&batch=1&autoAck=true", "", nil, &pop))
	require.EqualValues(t, 5, pop.Messages[0].Offset)

	// Exit codes: 1 for an unknown queue or partition, 2 for usage.
	_, code, err = tail("nope")
	require.Equal(t, exitError, code)
	require.ErrorContains(t, err, "404 not_found")
	_, code, err = tail("nope", "--partition", "p")
	require.Equal(t, exitError, code)
	require.ErrorContains(t, err, "404 not_found")
	_, code, err = tail("tq", "--partition", "nope")
	require.Equal(t, exitError, code)
	require.ErrorContains(t, err, "404 not_found")
	_, code, err = runTail(t, context.Background(), nil, "tail", "tq", "--server", base)
	require.Equal(t, exitError, code)
	require.ErrorContains(t, err, "401 unauthorized")
	for _, bad := range [][]string{{}, {"tq", "x"}, {"tq", "-n", "1001"}, {"tq", "-n", "-1"}, {"tq", "-o", "yaml"}, {"tq", "--interval", "0s"}, {"tq", "--bogus"}, {"a\x01b"}} {
		_, code, err := tail(bad...)
		require.Equal(t, exitUsage, code, "%q: %v", bad, err)
	}

	// --follow: prints what is pushed after it started, in a partition that
	// exists and in one created meanwhile, each message once.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var buf syncBuffer
	done := make(chan error, 1)
	go func() {
		_, _, err := runTail(t, ctx, &buf, append([]string{"tail", "tq", "--follow", "--interval", "50ms", "-n", "1", "-o", "json"}, s...)...)
		done <- err
	}()
	waitOutput(t, "the last message", &buf, func(s string) bool { return strings.Contains(s, `"o-1"`) })
	pushItems(t, base, "tq", "p", "late-1")
	waitOutput(t, "a message pushed while following", &buf, func(s string) bool { return strings.Contains(s, `"late-1"`) })
	pushItems(t, base, "tq", "np", "late-2")
	pushItems(t, base, "tq", "p", "late-3") // after late-2's reply: stored later
	waitOutput(t, "messages of a new partition and an old one", &buf, func(s string) bool {
		return strings.Contains(s, `"late-2"`) && strings.Contains(s, `"late-3"`)
	})
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err, "Ctrl-C ends --follow cleanly")
	case <-time.After(30 * time.Second):
		t.Fatal("queen tail --follow did not end after its context was canceled")
	}
	js = jsonLines(t, buf.String())
	var got []string
	for _, x := range js {
		got = append(got, x.Partition+"/"+x.TransactionID)
	}
	require.Equal(t, []string{"o/o-1", "p/late-1", "np/late-2", "p/late-3"}, got)
	require.EqualValues(t, 0, js[2].Offset)
	require.EqualValues(t, 13, js[3].Offset)
}

// runTail runs `queen args...` in process under ctx with the operator verbs
// and tail; out, when set, receives standard output (else it is returned).
func runTail(t *testing.T, ctx context.Context, out io.Writer, args ...string) (string, int, error) {
	t.Helper()
	root := &cobra.Command{Use: "queen", SilenceUsage: true, SilenceErrors: true}
	root.AddCommand(queuesCmd(), tailCmd(), dedupCmd(), dlqCmd(), clusterCmd())
	var buf bytes.Buffer
	if out == nil {
		out = &buf
	}
	root.SetOut(out)
	root.SetErr(io.Discard)
	root.SetArgs(args)
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	err := root.ExecuteContext(ctx)
	return buf.String(), exitCode(err), err
}

// TestTailFollowInterrupt: the process `queen tail --follow` ends with exit
// code 0 on SIGINT (Ctrl-C), after printing what was pushed.
func TestTailFollowInterrupt(t *testing.T) {
	b := startTokenBroker(t)
	pushItems(t, b.HTTPURL(), "iq", "p", "first")
	cmd := exec.Command(os.Args[0], "tail", "iq", "--follow", "--interval", "50ms", "--server", b.HTTPURL())
	cmd.Env = append(os.Environ(), runMainEnv+"=1", "QUEEN_ADMIN_TOKEN="+testToken)
	var stdout, stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Start())
	waitOutput(t, "the first message", &stdout, func(s string) bool { return strings.Contains(s, "first") })
	pushItems(t, b.HTTPURL(), "iq", "p", "second")
	waitOutput(t, "the second message", &stdout, func(s string) bool { return regexp.MustCompile(`(?m)^p\s+1\s.*second`).MatchString(s) })
	require.NoError(t, cmd.Process.Signal(os.Interrupt))
	err := cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		t.Fatalf("exit code %d after SIGINT; stderr: %s", ee.ExitCode(), stderr.String())
	}
	require.NoError(t, err)
	require.Empty(t, strings.TrimSpace(stderr.String()))
}
