package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
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
	"github.com/stretchr/testify/require"

	"github.com/queen-mq/queen-go/cmd/queen/internal/broker"
	"github.com/queen-mq/queen-go/loadtest"
	"github.com/queen-mq/queen-go/loadtest/report"
	"github.com/queen-mq/queen-go/persistence/pgtest"
)

// runMainEnv makes the test binary run the queen command instead of the
// tests: the subprocess tests re-execute it as `queen loadtest ...`.
const runMainEnv = "QUEEN_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		main()
		os.Exit(0)
	}
	pgtest.Main(m)
}

// startTestBroker starts a broker on a fresh database, random ports.
func startTestBroker(t *testing.T) *broker.Broker {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := broker.Start(ctx, broker.Config{
		DatabaseURL: pgtest.NewDatabase(t),
		HTTPAddr:    "127.0.0.1:0",
		NATSListen:  "127.0.0.1:0",
		DataDir:     t.TempDir(),
		Logger:      slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		require.NoError(t, b.Stop(ctx))
	})
	return b
}

// smallRun is a short, light load (the machine has 2 cores).
func smallRun(b *broker.Broker, target string) loadtest.Config {
	cfg := loadtest.DefaultConfig()
	cfg.Target, cfg.DatabaseURL = target, b.DatabaseURL()
	cfg.Producers, cfg.Partitions, cfg.Batch, cfg.PayloadBytes, cfg.DupRatio = 3, 8, 40, 100, 0.2
	cfg.Duration = time.Second
	return cfg
}

func dbExec(t *testing.T, ctx context.Context, url, sql string, args ...any) int64 {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	tag, err := conn.Exec(ctx, sql, args...)
	require.NoError(t, err)
	return tag.RowsAffected()
}

func TestLoadtestAudit(t *testing.T) {
	t.Parallel()
	b := startTestBroker(t)
	ctx := context.Background()

	for _, target := range []string{b.NATSURL(), b.HTTPURL()} {
		rep, err := loadtest.Run(ctx, smallRun(b, target))
		require.NoError(t, err, "%s", target)
		require.True(t, rep.Audit.Passed, "%v", rep.Audit.Examples)
		require.Positive(t, rep.Verdicts.Queued, target)
		require.Positive(t, rep.Verdicts.Duplicate, "repeats are answered duplicate (%s)", target)
		require.Equal(t, rep.Verdicts.Queued, rep.StoredMessages, "nothing failed, so every queued answer is one stored message")
		require.Equal(t, rep.NewItems, rep.Audit.TransactionIDs)
		requireBytesPerMessage(t, rep)
	}

	t.Run("double row planted", func(t *testing.T) {
		cfg := smallRun(b, b.NATSURL())
		cfg.Queue = "loadtest-double"
		cfg.AfterLoad = func(ctx context.Context) error {
			// A second segment repeating the frames of a stored one, at
			// fresh offsets.
			n := dbExec(t, ctx, b.DatabaseURL(), `
				INSERT INTO queen.segments (partition_num, first_offset, last_offset, created_at, legacy_ids, frames)
				SELECT s.partition_num, e.last_offset + 1, e.last_offset + 1 + s.last_offset - s.first_offset, s.created_at, s.legacy_ids, s.frames
				FROM queen.segments s
				JOIN queen.partitions p ON p.num = s.partition_num
				JOIN queen.partition_ends e ON e.partition_id = p.id
				JOIN queen.queues q ON q.id = p.queue_id
				WHERE q.name = $1
				ORDER BY s.partition_num, s.first_offset
				LIMIT 1`, cfg.Queue)
			require.Equal(t, int64(1), n)
			return nil
		}
		rep, err := loadtest.Run(ctx, cfg)
		require.ErrorIs(t, err, loadtest.ErrAuditFailed)
		require.False(t, rep.Audit.Passed)
		require.Positive(t, rep.Audit.Issues[report.IssueStoredTwice])
		require.Len(t, rep.Audit.Issues, 1, "%v", rep.Audit.Examples)
		require.Contains(t, strings.Join(rep.Audit.Examples, "\n"), "is stored 2 times")
	})

	t.Run("queued answer without a row", func(t *testing.T) {
		cfg := smallRun(b, b.NATSURL())
		cfg.Queue = "loadtest-missing"
		cfg.AfterLoad = func(ctx context.Context) error {
			n := dbExec(t, ctx, b.DatabaseURL(), `
				DELETE FROM queen.segments
				WHERE (partition_num, first_offset) IN (
					SELECT s.partition_num, s.first_offset
					FROM queen.segments s
					JOIN queen.partitions p ON p.num = s.partition_num
					JOIN queen.queues q ON q.id = p.queue_id
					WHERE q.name = $1
					ORDER BY s.partition_num, s.first_offset
					LIMIT 1)`, cfg.Queue)
			require.Equal(t, int64(1), n)
			return nil
		}
		rep, err := loadtest.Run(ctx, cfg)
		require.ErrorIs(t, err, loadtest.ErrAuditFailed)
		require.Positive(t, rep.Audit.Issues[report.IssueMissing])
		require.Len(t, rep.Audit.Issues, 1, "%v", rep.Audit.Examples)
		require.Contains(t, strings.Join(rep.Audit.Examples, "\n"), "is not stored")
	})
}

// consumeRun is smallRun with consumers: two groups of two, 5% poison,
// a light load (the consume phase pays four pop/ack cycles per poison
// message and group).
func consumeRun(b *broker.Broker, target string) loadtest.Config {
	cfg := smallRun(b, target)
	cfg.Producers, cfg.Batch = 1, 25
	cfg.Consumers, cfg.Groups, cfg.FailRatio, cfg.ConsumeBatch, cfg.WakeProbes = 2, 2, 0.05, 50, 10
	cfg.ConsumeDrainTimeout = 30 * time.Second
	return cfg
}

func TestLoadtestConsume(t *testing.T) {
	t.Parallel()
	b := startTestBroker(t)
	ctx := context.Background()

	for _, target := range []string{b.NATSURL(), b.HTTPURL()} {
		rep, err := loadtest.Run(ctx, consumeRun(b, target))
		require.NoError(t, err, "%s", target)
		require.True(t, rep.Audit.Passed, "%v", rep.Audit.Examples)
		c := rep.Consume
		require.NotNil(t, c)
		var text bytes.Buffer
		rep.WriteText(&text)
		t.Logf("%s:\n%s", target, text.String())
		a := c.Audit
		require.True(t, a.Passed, "issues %v, examples %v", a.Issues, a.Examples)
		require.True(t, a.Complete)
		require.True(t, c.Drained, c.DrainProblem)
		require.Equal(t, rep.StoredMessages, a.Messages)
		require.Positive(t, a.Poison, "5%% of the messages are poison")
		require.Zero(t, c.AckErrors)
		// Exact, per group: every other message acked once, every poison
		// one dead-lettered once after retryLimit+1 handlings.
		require.Equal(t, 2*(a.Messages-a.Poison), c.Acked)
		require.Equal(t, 2*a.Poison, c.DeadLettered)
		require.Equal(t, 2*a.Poison, a.DeadLetters)
		require.Equal(t, 2*(a.Messages+int64(c.RetryLimit)*a.Poison), c.Handled)
		require.Equal(t, 3, c.RetryLimit)
		require.Len(t, c.PerGroup, 2)
		require.Equal(t, rep.Queue+"-g1", c.PerGroup[1].Group)
		require.Positive(t, c.AckedPerSecond)
		require.Positive(t, c.Latency.P50)
		require.Equal(t, 10, c.Wake.Samples, "wake probe: %+v", c.Wake)
		require.Positive(t, c.Wake.P50)
		require.Contains(t, text.String(), "e2e audit passed")
	}

	// Multi-partition pops (--consume-partitions): the consumers' pops fill
	// their batch at up to 8 partitions, each span handled and acked as its
	// own batch; the counts are as exact as with one partition a pop.
	t.Run("multi-partition pops", func(t *testing.T) {
		for _, target := range []string{b.NATSURL(), b.HTTPURL()} {
			cfg := consumeRun(b, target)
			cfg.Queue, cfg.Partitions, cfg.ConsumePartitions, cfg.WakeProbes = "loadtest-consume-multi-"+target[:4], 64, 8, 0
			rep, err := loadtest.Run(ctx, cfg)
			require.NoError(t, err, "%s", target)
			c := rep.Consume
			a := c.Audit
			require.True(t, a.Passed, "issues %v, examples %v", a.Issues, a.Examples)
			require.True(t, c.Drained, c.DrainProblem)
			require.Equal(t, 8, c.ConsumePartitions)
			require.Greater(t, c.PartitionsPerPop, 1.0, "pops claim several partitions")
			require.Equal(t, 2*(a.Messages-a.Poison), c.Acked)
			require.Equal(t, 2*a.Poison, c.DeadLettered)
			require.Equal(t, 2*(a.Messages+int64(c.RetryLimit)*a.Poison), c.Handled)
		}
	})

	t.Run("tampered", func(t *testing.T) {
		cfg := consumeRun(b, b.NATSURL())
		cfg.Queue, cfg.WakeProbes = "loadtest-consume-tampered", 0
		cfg.AfterLoad = func(ctx context.Context) error {
			// A dead letter twice, and a cursor one short of the end.
			require.Equal(t, int64(1), dbExec(t, ctx, b.DatabaseURL(), `
				INSERT INTO queen.dead_letters (queue_id, partition_id, consumer_group, "offset", message_id, frame, created_at, error, attempts)
				SELECT d.queue_id, d.partition_id, d.consumer_group, d."offset", d.message_id, d.frame, d.created_at, d.error, d.attempts
				FROM queen.dead_letters d JOIN queen.queues q ON q.id = d.queue_id
				WHERE q.name = $1 ORDER BY d.id LIMIT 1`, cfg.Queue))
			require.Equal(t, int64(1), dbExec(t, ctx, b.DatabaseURL(), `
				UPDATE queen.consumers SET "cursor" = "cursor" - 1
				WHERE (partition_id, consumer_group) IN (
					SELECT c.partition_id, c.consumer_group FROM queen.consumers c
					JOIN queen.partitions p ON p.id = c.partition_id
					JOIN queen.queues q ON q.id = p.queue_id
					WHERE q.name = $1 AND c."cursor" >= 0 LIMIT 1)`, cfg.Queue))
			return nil
		}
		rep, err := loadtest.Run(ctx, cfg)
		require.ErrorIs(t, err, loadtest.ErrAuditFailed)
		require.ErrorContains(t, err, "end-to-end consume audit")
		require.True(t, rep.Audit.Passed, "the storage audit still passes")
		a := rep.Consume.Audit
		require.False(t, a.Passed)
		require.Equal(t, int64(1), a.Issues[report.IssueDLQTwice], "%v", a.Examples)
		require.Equal(t, int64(1), a.Issues[report.IssueCursorWrong], "%v", a.Examples)
		require.Len(t, a.Issues, 2, "%v", a.Examples)
	})
}

// Consumers that crash on poison messages (never ack them, abandon the
// lease), over NATS: with --fail-mode crash they ack the messages before the
// poison one, with crash-batch nothing of the batch. An expired span of
// several messages is bisected (nothing charged), a single-message one
// counts a failed delivery, so every poison message is dead-lettered once
// per group with "lease expired" after retryLimit+1 single-message
// expiries, and the audit proves it; the report's poison section matches
// the broker's /metrics. crash-batch-multi crashes batches of
// multi-partition pops (--consume-partitions 8), each partition's span
// handled as its own batch.
func TestLoadtestConsumeCrash(t *testing.T) {
	t.Parallel()
	for _, name := range []string{loadtest.FailCrash, loadtest.FailCrashBatch, loadtest.FailCrashBatch + "-multi"} {
		mode, multi := strings.CutSuffix(name, "-multi")
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := startTestBroker(t)
			cfg := consumeRun(b, b.NATSURL())
			// Every poison message holds its partition for a lease per
			// delivery: spread them (the transactionIds lt0-0 and lt0-2 are
			// poison at 5%, so every run has some).
			cfg.Queue, cfg.FailMode, cfg.RetryLimit, cfg.Partitions, cfg.WakeProbes = "loadtest-consume-"+name, mode, 1, 64, 0
			if multi {
				cfg.ConsumePartitions = 8
			}
			cfg.MetricsURLs = []string{b.HTTPURL()}
			rep, err := loadtest.Run(context.Background(), cfg)
			require.NoError(t, err)
			c := rep.Consume
			var text bytes.Buffer
			rep.WriteText(&text)
			t.Logf("%s", text.String())
			a := c.Audit
			require.True(t, a.Passed, "issues %v, examples %v", a.Issues, a.Examples)
			require.True(t, c.Drained, c.DrainProblem)
			require.Equal(t, 2, c.LeaseSeconds)
			require.Equal(t, mode, c.FailMode)
			require.Positive(t, a.Poison, "5%% of the messages are poison")
			require.Equal(t, 2*a.Poison, a.DeadLetters)
			require.Equal(t, 2*(a.Messages-a.Poison), c.Acked)
			require.Zero(t, c.DeadLettered, "no ack is answered dead_lettered: lease expiries dead-letter")
			p := c.Poison
			require.NotNil(t, p)
			R := int64(c.RetryLimit)
			require.Equal(t, 2*a.Poison*(R+1)+p.AbandonedSpans, p.AbandonedLeases)
			require.Equal(t, 2*a.Poison, p.Stalls+p.OpenStalls)
			if mode == loadtest.FailCrash {
				// The messages before a poison one are acked: each other
				// message is handled once, a poison one per abandoned lease.
				require.Equal(t, 2*(a.Messages-a.Poison)+p.AbandonedLeases, c.Handled)
			}
			require.NotNil(t, p.Brokers)
			require.Equal(t, p.AbandonedLeases, p.Brokers.LeaseExpiries, "every abandoned lease expired at the broker")
			require.Equal(t, p.AbandonedSpans, p.Brokers.Bisections)
			require.Equal(t, 2*a.Poison, p.Brokers.DeadLettered)
		})
	}
}

func TestLoadtestCompare(t *testing.T) {
	t.Parallel()
	b := startTestBroker(t)
	cfg := smallRun(b, b.NATSURL())
	cfg.Duration = 1500 * time.Millisecond
	cmp, err := loadtest.Compare(context.Background(), cfg, 3)
	require.NoError(t, err)
	require.Len(t, cmp.Rounds, 3)
	var ratios []float64
	for i, rd := range cmp.Rounds {
		require.Equal(t, i+1, rd.Round)
		require.Equal(t, loadtest.ModeBroker, rd.Broker.Mode)
		require.True(t, rd.Broker.Audit.Passed, "%v", rd.Broker.Audit.Examples)
		require.Positive(t, rd.Broker.StoredPerSecond)
		require.Equal(t, loadtest.ModeRaw, rd.Raw.Mode)
		require.Nil(t, rd.Raw.Audit)
		require.Positive(t, rd.Raw.StoredMessages)
		require.Equal(t, rd.Raw.Verdicts.Queued, rd.Raw.StoredMessages, "one row per item copied, repeats included")
		require.Equal(t, rd.Raw.ItemsSent, rd.Raw.StoredMessages)
		requireBytesPerMessage(t, rd.Raw)
		require.Positive(t, rd.Ratio)
		ratios = append(ratios, rd.Ratio)
	}
	require.NotEqual(t, cmp.Rounds[0].Broker.Queue, cmp.Rounds[1].Broker.Queue, "a fresh queue per round")
	require.NotEqual(t, cmp.Rounds[0].Raw.Table, cmp.Rounds[1].Raw.Table, "a fresh table per round")
	require.Contains(t, ratios, cmp.MedianRatio)

	// The raw tables are dropped after counting.
	conn, err := pgx.Connect(context.Background(), b.DatabaseURL())
	require.NoError(t, err)
	defer conn.Close(context.Background())
	var left int
	require.NoError(t, conn.QueryRow(context.Background(), `SELECT count(*) FROM pg_tables WHERE schemaname = 'queen_raw'`).Scan(&left))
	require.Zero(t, left)

	var text bytes.Buffer
	cmp.WriteText(&text)
	require.Contains(t, text.String(), "median ratio")
}

// requireBytesPerMessage checks the report's storage per stored message: a
// run that stored messages has them, positive (the sidecar's may be 0).
func requireBytesPerMessage(t *testing.T, rep *report.Report) {
	t.Helper()
	require.Positive(t, rep.StoredMessages)
	require.Empty(t, rep.StorageError)
	require.NotNil(t, rep.WALBytesPerMessage, "wal_bytes_per_message")
	require.Positive(t, *rep.WALBytesPerMessage)
	require.NotNil(t, rep.DBBytesPerMessage, "db_bytes_per_message")
	require.Positive(t, *rep.DBBytesPerMessage)
	require.NotNil(t, rep.SidecarBytesPerMessage, "sidecar_bytes_per_message")
	t.Logf("per stored message: %.1f B WAL, %.1f B database, %.1f B sidecar over %d messages",
		*rep.WALBytesPerMessage, *rep.DBBytesPerMessage, *rep.SidecarBytesPerMessage, rep.StoredMessages)
}

// child is `queen loadtest ...` run as a subprocess (this test binary
// re-executed), with its own TMPDIR.
type child struct {
	cmd    *exec.Cmd
	tmp    string
	stdout bytes.Buffer
	lines  chan string // stderr, line by line
	stderr bytes.Buffer
	done   chan error
}

func startChild(t *testing.T, args ...string) *child {
	t.Helper()
	c := &child{tmp: filepath.Join(t.TempDir(), "tmp"), lines: make(chan string, 1024), done: make(chan error, 1)}
	require.NoError(t, os.Mkdir(c.tmp, 0o755))
	c.cmd = exec.Command(os.Args[0], append([]string{"loadtest"}, args...)...)
	c.cmd.Env = append(os.Environ(), runMainEnv+"=1", "TMPDIR="+c.tmp)
	c.cmd.Stdout = &c.stdout
	errPipe, err := c.cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, c.cmd.Start())
	go func() {
		sc := bufio.NewScanner(errPipe)
		for sc.Scan() {
			c.stderr.WriteString(sc.Text() + "\n")
			select {
			case c.lines <- sc.Text():
			default:
			}
		}
		close(c.lines)
		c.done <- c.cmd.Wait()
	}()
	t.Cleanup(func() { _ = c.cmd.Process.Kill() })
	return c
}

// waitLine returns the first stderr line containing substr.
func (c *child) waitLine(t *testing.T, substr string) string {
	t.Helper()
	deadline := time.After(3 * time.Minute)
	for {
		select {
		case l, ok := <-c.lines:
			if !ok {
				t.Fatalf("the child exited before printing %q; stderr:\n%s", substr, c.stderr.String())
			}
			if strings.Contains(l, substr) {
				return l
			}
		case <-deadline:
			t.Fatalf("no %q from the child within 3 minutes", substr)
		}
	}
}

// wait waits for the child to exit and returns its exit code.
func (c *child) wait(t *testing.T) int {
	t.Helper()
	for range c.lines {
	}
	select {
	case err := <-c.done:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		require.NoError(t, err)
		return 0
	case <-time.After(3 * time.Minute):
		t.Fatalf("the child did not exit within 3 minutes; stderr:\n%s", c.stderr.String())
		return -1
	}
}

// cluster is the embedded broker's PostgreSQL as the child names it.
type cluster struct {
	area       string
	postmaster int
}

func (c *child) cluster(t *testing.T) cluster {
	t.Helper()
	line := c.waitLine(t, "embedded PostgreSQL cluster in ")
	cl := cluster{area: strings.TrimSpace(line[strings.Index(line, " in ")+4:])}
	c.waitLine(t, "embedded broker ready")
	b, err := os.ReadFile(filepath.Join(cl.area, "data", "postmaster.pid"))
	require.NoError(t, err)
	first, _, _ := strings.Cut(string(b), "\n")
	cl.postmaster, err = strconv.Atoi(strings.TrimSpace(first))
	require.NoError(t, err)
	require.True(t, alive(cl.postmaster))
	t.Logf("cluster %s, postmaster %d", cl.area, cl.postmaster)
	return cl
}

// requireCleanedUp checks that nothing of the embedded broker is left: no
// temporary folder, no cluster folder, no postgres process of the cluster.
func (c *child) requireCleanedUp(t *testing.T, cl cluster) {
	t.Helper()
	left, err := os.ReadDir(c.tmp)
	require.NoError(t, err)
	require.Empty(t, left, "the temporary folder is removed")
	_, err = os.Stat(cl.area)
	require.True(t, os.IsNotExist(err), "the cluster folder %s is removed (%v)", cl.area, err)
	require.False(t, alive(cl.postmaster), "the postmaster %d is gone", cl.postmaster)
	require.Empty(t, postgresIn(cl.area), "no postgres process of the cluster remains")
}

// alive reports whether pid is a live, non-zombie process.
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(stat, ')')
	return i < 0 || i+2 >= len(stat) || stat[i+2] != 'Z'
}

// postgresIn lists live processes working in (or started for) area.
func postgresIn(area string) []string {
	ents, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || !alive(pid) {
			continue
		}
		cwd, _ := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid))
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if strings.HasPrefix(cwd, area) || bytes.Contains(cmdline, []byte(area)) {
			out = append(out, fmt.Sprintf("%d %s", pid, bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '})))
		}
	}
	return out
}

func TestLoadtestEmbedded(t *testing.T) {
	t.Parallel()
	c := startChild(t, "--embedded", "--target", "http://embedded", "--duration", "1s", "--json",
		"--producers", "2", "--partitions", "4", "--batch", "20",
		"--consumers", "1", "--groups", "2", "--fail-ratio", "0.05", "--consume-batch", "30", "--wake-probes", "5")
	cl := c.cluster(t)
	require.Equal(t, 0, c.wait(t), "stderr:\n%s", c.stderr.String())
	var rep report.Report
	require.NoError(t, json.Unmarshal(c.stdout.Bytes(), &rep), "stdout is one JSON object: %s", c.stdout.String())
	require.True(t, strings.HasPrefix(rep.Target, "http://127.0.0.1:"), rep.Target)
	require.False(t, rep.Interrupted)
	require.True(t, rep.Audit.Passed, "%v", rep.Audit.Examples)
	require.Positive(t, rep.StoredMessages)
	requireBytesPerMessage(t, &rep)
	require.NotContains(t, c.stdout.String(), "progress", "progress goes to stderr only")
	// The consume phase, from the flags.
	require.NotNil(t, rep.Consume)
	require.True(t, rep.Consume.Audit.Passed, "%v", rep.Consume.Audit.Examples)
	require.Equal(t, 1, rep.Consume.ConsumersPerGroup)
	require.Len(t, rep.Consume.Groups, 2)
	require.Equal(t, 0.05, rep.Consume.FailRatio)
	require.Equal(t, 30, rep.Consume.Batch)
	require.Equal(t, rep.StoredMessages, rep.Consume.Audit.Messages)
	require.Equal(t, 5, rep.Consume.Wake.Rounds)
	c.requireCleanedUp(t, cl)
}

func TestLoadtestEmbeddedInterrupted(t *testing.T) {
	t.Parallel()
	c := startChild(t, "--embedded", "--duration", "10m", "--json", "--producers", "2", "--partitions", "4", "--batch", "20")
	cl := c.cluster(t)
	c.waitLine(t, "loadtest: progress")
	require.NoError(t, c.cmd.Process.Signal(os.Interrupt))
	code := c.wait(t)
	require.Equal(t, 1, code, "an interrupted run exits non-zero; stderr:\n%s", c.stderr.String())
	require.Contains(t, c.stderr.String(), "loadtest interrupted")
	var rep report.Report
	require.NoError(t, json.Unmarshal(c.stdout.Bytes(), &rep), "the report is still printed: %s", c.stdout.String())
	require.True(t, rep.Interrupted)
	require.Less(t, rep.Seconds, 300.0)
	require.True(t, rep.Audit.Passed, "%v", rep.Audit.Examples)
	requireBytesPerMessage(t, &rep)
	// The progress line came with the first sample.
	require.NotEmpty(t, rep.Timeline)
	var last int64
	for _, p := range rep.Timeline {
		if p.StoredMessages > last {
			require.NotNil(t, p.WALBytesPerMessage, "t=%g", p.T)
			require.Positive(t, *p.WALBytesPerMessage, "t=%g", p.T)
			require.NotNil(t, p.DBBytesPerMessage, "t=%g", p.T)
			require.NotNil(t, p.SidecarBytesPerMessage, "t=%g", p.T)
		} else {
			require.Nil(t, p.WALBytesPerMessage, "t=%g: nothing stored in the interval", p.T)
		}
		last = p.StoredMessages
	}
	c.requireCleanedUp(t, cl)
}

// TestLoadtestEmbeddedStartFails: when the embedded broker cannot start
// after its PostgreSQL is up (here: the HTTP port is taken), nothing is left
// behind either. Not parallel: it changes the embedded defaults.
func TestLoadtestEmbeddedStartFails(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	parent := t.TempDir()
	defer func(addr, tmp string) { embeddedHTTPAddr, embeddedTempParent = addr, tmp }(embeddedHTTPAddr, embeddedTempParent)
	embeddedHTTPAddr, embeddedTempParent = taken.Addr().String(), parent

	var stderr bytes.Buffer
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	err = withEmbeddedBroker(context.Background(), &stderr, log, "", func(*broker.Broker) error {
		t.Fatal("the broker must not start")
		return nil
	})
	t.Log(err)
	require.ErrorContains(t, err, "start the embedded broker")
	left, rerr := os.ReadDir(parent)
	require.NoError(t, rerr)
	require.Empty(t, left, "the temporary folder is removed")
	dir := strings.TrimSpace(strings.TrimPrefix(strings.SplitN(stderr.String(), "\n", 2)[0], "loadtest: embedded broker in "))
	require.True(t, strings.HasPrefix(dir, parent), stderr.String())
	sum := sha256.Sum256([]byte(filepath.Join(dir, "data")))
	rootArea := filepath.Join("/var/lib/queen-pg", hex.EncodeToString(sum[:])[:16])
	_, serr := os.Stat(rootArea)
	require.True(t, os.IsNotExist(serr), "no cluster folder in %s", rootArea)
	require.Empty(t, postgresIn(dir), "no postgres process of the cluster remains")
	require.Empty(t, postgresIn(rootArea), "no postgres process of the cluster remains")
}
