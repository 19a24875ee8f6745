package client

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/require"

	"github.com/queen-mq/queen-go/transport/natstest"
)

func TestParseNATSURLs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"nats://127.0.0.1:4222", []string{"nats://127.0.0.1:4222"}},
		{"nats://a:4222,nats://b:4222", []string{"nats://a:4222", "nats://b:4222"}},
		{" nats://a:4222 , tls://b:4222,ws://c:8080 ", []string{"nats://a:4222", "tls://b:4222", "ws://c:8080"}},
	} {
		got, err := ParseNATSURLs(tc.in)
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.want, got, tc.in)
	}
	for _, bad := range []string{"", "nats://a:4222,", "http://a:6632", "nats://a:4222,b:4222", "nats://"} {
		_, err := ParseNATSURLs(bad)
		require.Error(t, err, bad)
		require.Contains(t, err.Error(), "want nats://host:port", bad)
	}
	_, err := ConnectNATS("nats://a:1,http://b:2", "x")
	require.ErrorContains(t, err, `"http://b:2"`)
}

// The connection settings notice a dead server within 15 s and never give
// up reconnecting (SPEC.md §9).
func TestNATSOptionsPingBudget(t *testing.T) {
	t.Parallel()
	nodes := natstest.StartCluster(t, 1, nil)
	nc, err := ConnectNATS(natstest.URLs(nodes), "budget")
	require.NoError(t, err)
	defer nc.Close()
	require.Equal(t, NATSPingInterval, nc.Opts.PingInterval)
	require.Equal(t, NATSMaxPingsOut, nc.Opts.MaxPingsOut)
	require.LessOrEqual(t, nc.Opts.PingInterval*time.Duration(nc.Opts.MaxPingsOut+1), 15*time.Second)
	require.Equal(t, -1, nc.Opts.MaxReconnect)
	require.Equal(t, "budget", nc.Opts.Name)
}

// connectedTo is the index of the node nc is connected to (-1: none).
func connectedTo(nodes []*server.Server, nc *nats.Conn) int {
	id := nc.ConnectedServerId()
	for i, s := range nodes {
		if s.ID() == id {
			return i
		}
	}
	return -1
}

// A micro service (the broker's NATS API) and a plain subscription (a
// shard subject) on a connection to one node of a 3-node cluster answer
// again through the other nodes once that node is shut down: the
// connection moves to another node with its subscriptions.
func TestClusterNodeLossKeepsSubscriptions(t *testing.T) {
	t.Parallel()
	nodes := natstest.StartCluster(t, 3, nil)
	srvConn, err := ConnectNATS(natstest.URLs(nodes), "service")
	require.NoError(t, err)
	defer srvConn.Close()
	svc, err := micro.AddService(srvConn, micro.Config{Name: "queen-test", Version: "0.0.1",
		Endpoint: &micro.EndpointConfig{Subject: "test.echo", Handler: micro.HandlerFunc(func(r micro.Request) { _ = r.Respond(r.Data()) })}})
	require.NoError(t, err)
	defer svc.Stop() //nolint:errcheck // cleanup at the test's end
	_, err = srvConn.QueueSubscribe("test.shard.1", "q", func(m *nats.Msg) { _ = m.Respond(append([]byte("shard:"), m.Data...)) })
	require.NoError(t, err)
	require.NoError(t, srvConn.Flush())

	lost := connectedTo(nodes, srvConn)
	require.GreaterOrEqual(t, lost, 0)
	other := nodes[(lost+1)%3]
	client, err := ConnectNATS(other.ClientURL(), "client")
	require.NoError(t, err)
	defer client.Close()
	// The subscriptions have reached the client's node.
	require.Eventually(t, func() bool {
		_, err := client.Request("test.echo", []byte("x"), time.Second)
		return err == nil
	}, 30*time.Second, 10*time.Millisecond)

	nodes[lost].Shutdown()
	require.Eventually(t, func() bool {
		m1, err1 := client.Request("test.echo", []byte("a"), time.Second)
		m2, err2 := client.Request("test.shard.1", []byte("b"), time.Second)
		return err1 == nil && err2 == nil && string(m1.Data) == "a" && string(m2.Data) == "shard:b"
	}, 30*time.Second, 10*time.Millisecond, "the subscriptions answer again through another node")
	require.NotEqual(t, lost, connectedTo(nodes, srvConn))
	require.True(t, srvConn.IsConnected())
}

// A node entering lame-duck mode (a rolling restart) loses its clients to
// the other nodes at once, long before it would close them: its grace
// period here is a minute.
func TestLameDuckNodeMovesClientsAway(t *testing.T) {
	t.Parallel()
	nodes := natstest.StartCluster(t, 3, func(_ int, o *server.Options) {
		o.LameDuckDuration = 2 * time.Minute
		o.LameDuckGracePeriod = -time.Minute // negative: longer than the duration allows, as nats-server's tests do
	})
	nc, err := ConnectNATS(nodes[0].ClientURL(), "ldm")
	require.NoError(t, err)
	defer nc.Close()
	_, err = nc.Subscribe("test.ldm", func(m *nats.Msg) { _ = m.Respond([]byte("ok")) }) // a lost reply fails the request below
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
	// The client learns the other nodes from the cluster's INFO.
	require.Eventually(t, func() bool { return len(nc.DiscoveredServers()) >= 2 }, 30*time.Second, 10*time.Millisecond)

	go nodes[0].LameDuckShutdown()
	require.Eventually(t, func() bool {
		i := connectedTo(nodes, nc)
		return nc.IsConnected() && i > 0
	}, 30*time.Second, 10*time.Millisecond, "the client left the lame-duck node within its grace period")
	client, err := ConnectNATS(nodes[2].ClientURL(), "client")
	require.NoError(t, err)
	defer client.Close()
	require.Eventually(t, func() bool {
		m, err := client.Request("test.ldm", nil, time.Second)
		return err == nil && string(m.Data) == "ok"
	}, 30*time.Second, 10*time.Millisecond)
}
