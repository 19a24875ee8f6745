package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/queen-mq/queen-go/loadtest"
	"github.com/queen-mq/queen-go/loadtest/report"
)

// TestLoadtestAsyncProducer: `queen loadtest --producer-mode async` publishes
// single items through the async producer, over NATS (the command, its JSON
// report) and HTTP (loadtest.Run); the audit passes, repeats are answered
// duplicate, and requests carry many items.
func TestLoadtestAsyncProducer(t *testing.T) {
	t.Parallel()
	b := startTestBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	cmd := loadtestCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(io.Discard)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	cmd.SetArgs([]string{"--target", b.NATSURL(), "--database-url", b.DatabaseURL(), "--producer-mode", "async", "--batch", "1",
		"--in-flight", "200", "--producers", "3", "--partitions", "8", "--payload-bytes", "100", "--dup-ratio", "0.2",
		"--duration", "1s", "--json"})
	require.NoError(t, cmd.ExecuteContext(ctx))
	var rep report.Report
	require.NoError(t, json.Unmarshal(out.Bytes(), &rep), "%s", out.String())
	checkAsyncReport(t, &rep, 100)

	cfg := smallRun(b, b.HTTPURL())
	cfg.ProducerMode, cfg.Batch, cfg.InFlight, cfg.MaxBatch = loadtest.ProducerAsync, 1, 100, 20
	r, err := loadtest.Run(ctx, cfg)
	require.NoError(t, err)
	checkAsyncReport(t, r, 20)

	var text bytes.Buffer
	r.WriteText(&text)
	require.Contains(t, text.String(), "async (single items; 100 in flight, up to 20 per request")
}

func checkAsyncReport(t *testing.T, rep *report.Report, maxBatch int) {
	t.Helper()
	require.Equal(t, loadtest.ProducerAsync, rep.ProducerMode)
	require.Equal(t, maxBatch, rep.MaxBatch)
	require.NotNil(t, rep.Audit)
	require.True(t, rep.Audit.Passed, "%v", rep.Audit.Examples)
	require.Positive(t, rep.Verdicts.Queued)
	require.Positive(t, rep.Verdicts.Duplicate, "repeats are answered duplicate")
	require.Equal(t, rep.Verdicts.Queued, rep.StoredMessages, "nothing failed, so every queued answer is one stored message")
	require.Equal(t, rep.NewItems, rep.Audit.TransactionIDs)
	require.Equal(t, rep.NewItems+rep.Repeats, rep.Verdicts.Queued+rep.Verdicts.Duplicate, "every published item got a verdict")
	require.Less(t, rep.Requests, rep.ItemsSent, "single items share requests")
	require.Zero(t, rep.GaveUp+rep.Rejected+rep.UnknownOutcome)
}

// TestLoadtestSharedConnections: --connections N makes the sync producers
// share N NATS connections round robin; the run's audit passes and the
// report says so.
func TestLoadtestSharedConnections(t *testing.T) {
	t.Parallel()
	b := startTestBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cfg := smallRun(b, b.NATSURL())
	cfg.Producers, cfg.Connections, cfg.Batch = 5, 2, 1
	r, err := loadtest.Run(ctx, cfg)
	require.NoError(t, err)
	require.Equal(t, 2, r.Connections)
	require.True(t, r.Audit.Passed, "%v", r.Audit.Examples)
	require.Positive(t, r.Verdicts.Queued)
	require.Equal(t, r.Verdicts.Queued, r.StoredMessages)
	var text bytes.Buffer
	r.WriteText(&text)
	require.Contains(t, text.String(), "producers 5 over 2 NATS connections")
}
