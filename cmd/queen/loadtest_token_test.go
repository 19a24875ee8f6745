package main

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/cmd/queen/internal/broker"
	"github.com/queen-mq/queen-go/loadtest"
	"github.com/queen-mq/queen-go/persistence/pgtest"
)

// TestLoadtestSendsTheAdminToken (issue 29): against a broker with an admin
// token, a loadtest whose configure of the run's queue the token guards
// (an existing queue's window shortened from 1 h to 2 min; over NATS its
// retention lowered from keep to 10 min too) fails with 401 unauthorized without the
// token, and runs and passes its audit with it (Config.AdminToken), over
// NATS and over HTTP (there with a consume phase, whose configure the admin
// client sends). queen loadtest's --token defaults to QUEEN_ADMIN_TOKEN.
func TestLoadtestSendsTheAdminToken(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := broker.Start(ctx, broker.Config{
		DatabaseURL: pgtest.NewDatabase(t),
		HTTPAddr:    "127.0.0.1:0",
		NATSListen:  "127.0.0.1:0",
		DataDir:     t.TempDir(),
		AdminToken:  "s3cret",
		Logger:      slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		require.NoError(t, b.Stop(ctx))
	})
	for _, c := range []struct {
		queue, target string
		consumers     int
	}{
		{"lt-tok-nats", b.NATSURL(), 0},
		{"lt-tok-http", b.HTTPURL(), 1},
	} {
		// The queue exists with the default options (creating it is open).
		require.Equal(t, 200, httpJSON(t, "POST", b.HTTPURL()+"/api/v1/configure", "", map[string]any{"queue": c.queue}, nil))
		cfg := smallRun(b, c.target)
		cfg.Queue, cfg.Consumers = c.queue, c.consumers
		cfg.DedupWindow, cfg.SampleEvery = 2*time.Minute, time.Second
		if c.consumers == 0 { // (the consume audit needs every message)
			cfg.Retention = 10 * time.Minute
		}

		_, err := loadtest.Run(context.Background(), cfg)
		var qe *queen.Error
		require.ErrorAs(t, err, &qe, "%s without the token", c.queue)
		require.Equal(t, "unauthorized", qe.Code, "%s without the token: %v", c.queue, err)
		require.Equal(t, 401, qe.Status)

		cfg.AdminToken = "s3cret"
		rep, err := loadtest.Run(context.Background(), cfg)
		require.NoError(t, err, c.queue)
		require.True(t, rep.Audit.Passed, "%v", rep.Audit.Examples)
		require.Positive(t, rep.Verdicts.Queued, c.queue)

		var q struct {
			Options map[string]any `json:"options"`
		}
		require.Equal(t, 200, httpJSON(t, "GET", b.HTTPURL()+"/api/v1/resources/queues/"+c.queue, "s3cret", nil, &q))
		require.EqualValues(t, 120, q.Options["dedupWindowSeconds"], c.queue)
		require.EqualValues(t, cfg.Retention/time.Second, q.Options["retentionSeconds"], c.queue)
	}

	t.Setenv("QUEEN_ADMIN_TOKEN", "from-env")
	require.Equal(t, "from-env", loadtestCmd().Flags().Lookup("token").DefValue)
}
