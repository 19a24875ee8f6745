package broker

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/queen-mq/queen-go/lifecycle"
	"github.com/queen-mq/queen-go/persistence/localpg"
)

// TestLifecycleRefusesInvalidSettings: the broker's own services refuse a
// bad setting before starting anything, naming it.
func TestLifecycleRefusesInvalidSettings(t *testing.T) {
	_, err := newManagedPG(localpg.Config{})
	var se *lifecycle.SettingError
	require.ErrorAs(t, err, &se)
	require.Equal(t, "localpg.Config.DataDir", se.Setting)
	for _, c := range []struct{ listen, want string }{
		{"4222", `bad NATS listen address "4222"`},
		{"127.0.0.1:x", `bad NATS listen port "x"`},
	} {
		_, err := newEmbeddedNATS(c.listen, "")
		require.ErrorContains(t, err, c.want)
	}
	_, err = newEmbeddedNATS("127.0.0.1:0", "")
	require.NoError(t, err)
	_, err = newEmbeddedNATS("127.0.0.1:0", filepath.Join(t.TempDir(), "missing.conf"))
	require.ErrorContains(t, err, "QUEEN_NATS_CONFIG")
}

// svcFunc is a lifecycle.Service from two functions.
type svcFunc struct{ start, stop func() error }

func (s svcFunc) Start(context.Context) error { return s.start() }
func (s svcFunc) Stop(context.Context) error  { return s.stop() }

// TestLifecycleStopsInReverseWithErrorsJoined: teardown stops the pieces
// last started first, joins their errors (a warning-only stop is logged),
// and a failed start leaves the failed piece off the list.
func TestLifecycleStopsInReverseWithErrorsJoined(t *testing.T) {
	b := &Broker{log: quietLogger()}
	var order []string
	piece := func(name string, startErr, stopErr error) lifecycle.Service {
		return svcFunc{start: func() error { return startErr }, stop: func() error { order = append(order, name); return stopErr }}
	}
	ctx := context.Background()
	errA, errC := errors.New("a failed"), errors.New("c failed")
	require.NoError(t, b.run(ctx, "a", piece("a", nil, errA)))
	b.onStop("b", func(context.Context) error { order = append(order, "b"); return nil })
	require.NoError(t, b.run(ctx, "c", piece("c", nil, errC)))
	require.NoError(t, b.runWarn(ctx, "d", "d is only a warning", piece("d", nil, errors.New("d failed"))))
	require.ErrorContains(t, b.run(ctx, "e", piece("e", errors.New("no"), nil)), "broker: starting e: no")
	err := b.stopAll(ctx)
	require.Equal(t, []string{"d", "c", "b", "a"}, order)
	require.ErrorIs(t, err, errA)
	require.ErrorIs(t, err, errC)
	require.ErrorContains(t, err, "broker: stopping c: c failed")
	require.NotContains(t, err.Error(), "d failed")
	require.NoError(t, b.stopAll(ctx), "nothing left to stop")
}

// TestBrokerReachesEmbeddedNATSInProcess: with the embedded NATS server
// the broker's own connections are in process (net.Pipe, no loopback
// socket: at 256 single-item producers that was a read and a write
// syscall per request and reply), while clients still reach it over TCP.
func TestBrokerReachesEmbeddedNATSInProcess(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nil)
	for _, nc := range []*nats.Conn{e.b.nc, e.b.ncShards} {
		require.Equal(t, "pipe", nc.ConnectedAddr(), "the broker's connection %q", nc.Opts.Name)
	}
	require.NotEqual(t, "pipe", e.nc.ConnectedAddr(), "the test's client connects over TCP")
	e.pushOK(t, "nats", items(it("inproc", "p", "t1")), 1)
}
