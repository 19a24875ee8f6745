package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// runPush runs `queen push args...` in process, with the environment as it
// is now (flag defaults read it when the command is built).
func runPush(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := pushCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(io.Discard)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	cmd.SetArgs(args)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := cmd.ExecuteContext(ctx)
	return out.String(), err
}

// pushVerdict is the status of the only item of a push reply.
func pushVerdict(t *testing.T, out string) string {
	t.Helper()
	var rs []struct {
		Status        string `json:"status"`
		TransactionID string `json:"transactionId"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &rs), "reply %q", out)
	require.Len(t, rs, 1)
	return rs[0].Status
}

// TestPushFindsTheBroker: `queen push` reaches a broker whose NATS and HTTP
// listeners are not on the default ports through the settings serve reads
// (QUEEN_NATS_LISTEN, QUEEN_HTTP_ADDR) or the --nats-url / --server flags,
// and a failed dial names the address and the setting it came from.
func TestPushFindsTheBroker(t *testing.T) {
	b := startTestBroker(t)
	nu, err := url.Parse(b.NATSURL())
	require.NoError(t, err)
	_, natsPort, err := net.SplitHostPort(nu.Host)
	require.NoError(t, err)
	hu, err := url.Parse(b.HTTPURL())
	require.NoError(t, err)
	_, httpPort, err := net.SplitHostPort(hu.Host)
	require.NoError(t, err)
	t.Setenv("NATS_URL", "")
	t.Setenv("QUEEN_HTTP_ADDR", "")

	// The embedded server's listen address, as serve was given it (an
	// unspecified host is dialled on the loopback address).
	t.Setenv("QUEEN_NATS_LISTEN", "0.0.0.0:"+natsPort)
	out, err := runPush(t, "--queue", "cli", "--transaction-id", "cli-1")
	require.NoError(t, err)
	require.Equal(t, "queued", pushVerdict(t, out))

	// The flags.
	t.Setenv("QUEEN_NATS_LISTEN", "")
	out, err = runPush(t, "--nats-url", b.NATSURL(), "--queue", "cli", "--transaction-id", "cli-1")
	require.NoError(t, err)
	require.Equal(t, "duplicate", pushVerdict(t, out))
	out, err = runPush(t, "--server", b.HTTPURL(), "--queue", "cli", "--transaction-id", "cli-2", "--payload", `{"n":2}`)
	require.NoError(t, err)
	require.Equal(t, "queued", pushVerdict(t, out))
	t.Setenv("QUEEN_HTTP_ADDR", "127.0.0.1:"+httpPort)
	out, err = runPush(t, "--via", "http", "--queue", "cli", "--transaction-id", "cli-2")
	require.NoError(t, err)
	require.Equal(t, "duplicate", pushVerdict(t, out))

	// A push the broker refuses (a payload over its QUEEN_MAX_PAYLOAD_BYTES,
	// which the CLI leaves to it) prints the broker's error body and fails.
	big := `{"items":[{"queue":"cli","payload":"` + strings.Repeat("x", 4<<20) + `"}]}`
	out, err = runPush(t, "--server", b.HTTPURL(), "--file", writeTemp(t, big))
	require.ErrorContains(t, err, "push refused (4")
	require.Contains(t, out, `"field":"items[0].payload"`)

	// Nothing listens: the error names what was dialled and why.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := l.Addr().String()
	require.NoError(t, l.Close())
	t.Setenv("QUEEN_NATS_LISTEN", dead)
	_, err = runPush(t, "--queue", "cli")
	require.Error(t, err)
	require.Contains(t, err.Error(), "nats://"+dead)
	require.Contains(t, err.Error(), "QUEEN_NATS_LISTEN="+dead)
	_, err = runPush(t, "--server", "http://"+dead, "--queue", "cli")
	require.Error(t, err)
	require.True(t, strings.Contains(err.Error(), "http://"+dead+"/api/v1/push") && strings.Contains(err.Error(), "--server"), err.Error())
	_, err = runPush(t, "--via", "carrier-pigeon", "--queue", "cli")
	require.ErrorContains(t, err, "--via")
}

func writeTemp(t *testing.T, s string) string {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "body-*.json")
	require.NoError(t, err)
	_, err = f.WriteString(s)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	return f.Name()
}

// TestPushRefusesBadTextBeforeSending: `queen push` checks the names, the
// transactionId and the traceId as the broker does before encoding them
// (issue 29): "\xff\xfe" and "\xfe\xff", which JSON would both turn into
// "\ufffd\ufffd", are refused with the broker's error body, and nothing is
// sent. The operator verbs refuse such names as usage errors.
func TestPushRefusesBadTextBeforeSending(t *testing.T) {
	// Nothing listens: a refusal, not a dial error, proves nothing was sent.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := l.Addr().String()
	require.NoError(t, l.Close())
	for _, c := range []struct {
		args        []string
		code, field string
	}{
		{[]string{"--queue", "q", "--transaction-id", "\xff\xfe"}, "invalid_utf8", "items[0].transactionId"},
		{[]string{"--queue", "q", "--transaction-id", "\xfe\xff"}, "invalid_utf8", "items[0].transactionId"},
		{[]string{"--queue", "q", "--partition", "\xfe\xff"}, "invalid_utf8", "items[0].partition"},
		{[]string{"--queue", "q\xff"}, "invalid_utf8", "items[0].queue"},
		{[]string{"--queue", "q", "--trace-id", "\xff"}, "invalid_utf8", "items[0].traceId"},
		{[]string{"--queue", "\ufeffq"}, "control_character", "items[0].queue"},
		{[]string{"--queue", "q", "--partition", "p\u2028"}, "control_character", "items[0].partition"},
		{[]string{"--queue", "q", "--transaction-id", "t\u0085"}, "control_character", "items[0].transactionId"},
	} {
		for _, via := range [][]string{{"--nats-url", "nats://" + dead}, {"--server", "http://" + dead}} {
			out, err := runPush(t, append(via, c.args...)...)
			require.Error(t, err, "%q", c.args)
			require.Contains(t, err.Error(), "push refused before sending (400 "+c.code+")", "%q", c.args)
			require.Contains(t, err.Error(), "nothing was sent")
			var e struct {
				Code  string `json:"code"`
				Field string `json:"field"`
				Index *int   `json:"index"`
			}
			require.NoError(t, json.Unmarshal([]byte(out), &e), "stdout %q", out)
			require.Equal(t, c.code, e.Code)
			require.Equal(t, c.field, e.Field)
			require.NotNil(t, e.Index)
		}
	}

	// Against a broker: both ids refused, then a good push is the queue's
	// only message.
	b := startTestBroker(t)
	for _, txn := range []string{"\xff\xfe", "\xfe\xff"} {
		_, err := runPush(t, "--nats-url", b.NATSURL(), "--queue", "cli-utf8", "--transaction-id", txn)
		require.ErrorContains(t, err, "invalid_utf8")
		_, err = runPush(t, "--server", b.HTTPURL(), "--queue", "cli-utf8", "--transaction-id", txn)
		require.ErrorContains(t, err, "invalid_utf8")
	}
	out, err := runPush(t, "--nats-url", b.NATSURL(), "--queue", "cli-utf8", "--transaction-id", "ok")
	require.NoError(t, err)
	require.Equal(t, "queued", pushVerdict(t, out))
	var q struct {
		Messages int64 `json:"messages"`
	}
	require.Equal(t, 200, httpJSON(t, "GET", b.HTTPURL()+"/api/v1/resources/queues/cli-utf8", "", nil, &q))
	require.Equal(t, int64(1), q.Messages)

	// The operator verbs: a usage error (exit 2) naming the argument.
	for _, args := range [][]string{
		{"queues", "q\xff"},
		{"dedup", "q", "p", "\xfe\xff"},
		{"dlq", "list", "q", "--partition", "\ufeffp"},
		{"dlq", "replay", "q\xfe\xff", "--group", "g", "--id", "1"},
	} {
		_, code, err := runOp(t, append(args, "--server", "http://"+dead)...)
		require.Error(t, err, "%q", args)
		require.Equal(t, exitUsage, code, "%q: %v", args, err)
		require.Contains(t, err.Error(), "nothing was sent", "%q", args)
	}
}

// TestLoadtestFindsTheBroker (issue 29, item 5): `queen loadtest` without
// --target finds its broker as `queen push` does (defaultNATSURL): with
// QUEEN_NATS_LISTEN naming the broker's embedded NATS server it loads that
// broker (and says where the target came from), not 127.0.0.1:4222. The
// timeline of a NATS target has no broker /metrics: rss and cache are n/a,
// and a run this short prints no sustained ratio.
func TestLoadtestFindsTheBroker(t *testing.T) {
	b := startTestBroker(t)
	nu, err := url.Parse(b.NATSURL())
	require.NoError(t, err)
	_, natsPort, err := net.SplitHostPort(nu.Host)
	require.NoError(t, err)
	t.Setenv("NATS_URL", "")
	t.Setenv("QUEEN_NATS_LISTEN", "0.0.0.0:"+natsPort)
	cmd := loadtestCmd()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	cmd.SetArgs([]string{"--database-url", b.DatabaseURL(), "--duration", "2s", "--sample-every", "1s", "--producers", "2", "--partitions", "4", "--batch", "20"})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	require.NoError(t, cmd.ExecuteContext(ctx), "stderr: %s", errOut.String())
	require.Contains(t, errOut.String(), "loadtest: target nats://127.0.0.1:"+natsPort+" (from QUEEN_NATS_LISTEN=0.0.0.0:"+natsPort+")")
	require.Contains(t, out.String(), "audit     passed")
	require.Contains(t, errOut.String(), "broker rss n/a")
	require.Contains(t, errOut.String(), "cache n/a")
	require.NotContains(t, out.String(), "sustained ratio")
}

// TestPushFileRefusedBeforeSending: `queen push --file` checks the whole body
// with the broker's own decoder and rules before sending it: a body the
// broker would refuse (bad UTF-8 or a lone surrogate, a control or separator
// character in a name or id, a missing queue, an id too long or not a
// string, too deep, items not an array, trailing bytes, no items) is refused
// with the broker's code, field and index, and nothing is sent (nothing
// listens at the address). The broker, sent the same body, answers the same
// code and field; a valid body is sent unchanged.
func TestPushFileRefusedBeforeSending(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := l.Addr().String()
	require.NoError(t, l.Close())
	b := startTestBroker(t)
	deep := strings.Repeat("[", 10001) + strings.Repeat("]", 10001)
	for _, c := range []struct{ body, code, field string }{
		{"{\"items\":[{\"queue\":\"f\",\"transactionId\":\"\xff\xfe\"}]}", "invalid_utf8", "items[0].transactionId"},
		{"{\"items\":[{\"queue\":\"f\",\"transactionId\":\"ok\"},{\"queue\":\"f\",\"partition\":\"\xfe\xff\"}]}", "invalid_utf8", "items[1].partition"},
		{`{"items":[{"queue":"f","transactionId":"\ud800"}]}`, "invalid_utf8", ""},
		{`{"items":[{"queue":"f\u2028"}]}`, "control_character", "items[0].queue"},
		{"{\"items\":[{\"queue\":\"f\",\"traceId\":\"t\xff\"}]}", "invalid_utf8", "items[0].traceId"},
		{`{"items":[{"queue":"f","transactionId":"t\u0000"}]}`, "control_character", "items[0].transactionId"},
		{`{"items":[{"partition":"p"}]}`, "missing_field", "items[0].queue"},
		{`{"items":[{"queue":"f","transactionId":"` + strings.Repeat("t", 1025) + `"}]}`, "", "items[0].transactionId"},
		{`{"items":[{"queue":"f","transactionId":7}]}`, "", "items[0].transactionId"},
		{`{"items":[{"queue":"f","payload":` + deep + `}]}`, "", ""},
		{`{"items":{"queue":"f"}}`, "", "items"},
		{`{"items":[]} trailing`, "invalid_json", ""},
		{`{"queue":"f"}`, "missing_field", "items"},
	} {
		file := writeTemp(t, c.body)
		// The broker's answer to the same body.
		status, broker := postRaw(t, b.HTTPURL()+"/api/v1/push", c.body)
		require.True(t, status >= 400 && status < 500, "broker status %d for %.80q", status, c.body)
		for _, via := range [][]string{{"--nats-url", "nats://" + dead}, {"--server", "http://" + dead}} {
			out, err := runPush(t, append(via, "--file", file)...)
			require.Error(t, err, "%.80q", c.body)
			require.Contains(t, err.Error(), "push refused before sending (4", "%.80q", c.body)
			require.Contains(t, err.Error(), "nothing was sent")
			var cli errReply
			require.NoError(t, json.Unmarshal([]byte(out), &cli), "stdout %q", out)
			if c.code != "" {
				require.Equal(t, c.code, cli.Code, "%.80q", c.body)
			}
			if c.field != "" {
				require.Equal(t, c.field, cli.Field, "%.80q", c.body)
			}
			require.Equal(t, broker, cli, "the broker's answer to %.80q", c.body)
		}
	}
	// A valid body is sent as it is.
	out, err := runPush(t, "--server", b.HTTPURL(), "--file", writeTemp(t, `{"items":[{"queue":"cli-file","transactionId":"f1","payload":{"a":1}}]}`))
	require.NoError(t, err)
	require.Equal(t, "queued", pushVerdict(t, out))
}

// errReply is the part of an error body the CLI and the broker must agree on.
type errReply struct {
	Code  string `json:"code"`
	Field string `json:"field"`
	Index *int   `json:"index"`
}

// postRaw posts body as it is and decodes the error body of the answer.
func postRaw(t *testing.T, u, body string) (int, errReply) {
	t.Helper()
	resp, err := http.Post(u, "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	var e errReply
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	if resp.StatusCode >= 400 {
		require.NoError(t, json.Unmarshal(b, &e), "%s", b)
	}
	return resp.StatusCode, e
}

// TestPushExitCodes (issue 38): `queen push` exits as the operator verbs do
// (README, Operator API and CLI): 2 for a bad flag or argument, a missing
// --queue, a --payload that is not JSON or a value the broker would refuse
// (nothing sent), 1 when the broker cannot be reached.
func TestPushExitCodes(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := l.Addr().String()
	require.NoError(t, l.Close())
	at := []string{"--server", "http://" + dead}
	for _, c := range []struct {
		args []string
		code int
	}{
		{[]string{"--nope"}, exitUsage},
		{[]string{"--queue"}, exitUsage},
		{[]string{"--queue", "q", "--timeout", "soon"}, exitUsage},
		{[]string{"--queue", "q", "extra"}, exitUsage},
		{[]string{"--queue", "q", "--via", "carrier-pigeon"}, exitUsage},
		{[]string{"--payload", "{}"}, exitUsage},
		{[]string{"--queue", "q", "--payload", "{nope"}, exitUsage},
		{[]string{"--queue", "q\xff"}, exitUsage},
		{[]string{"--queue", "q"}, exitError}, // nothing listens: unreachable
	} {
		_, err := runPush(t, append(append([]string{}, at...), c.args...)...)
		require.Error(t, err, "%q", c.args)
		require.Equal(t, c.code, exitCode(err), "%q: %v", c.args, err)
	}
}
