package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestNATSNodeOptions: the nats-node flags become the node's listeners and
// routes; a bad address or route URL is an error naming its flag.
func TestNATSNodeOptions(t *testing.T) {
	t.Parallel()
	o, err := natsNodeOptions("n1", "127.0.0.1:4300", "127.0.0.1:6300", "c", "nats://127.0.0.1:6301, nats://127.0.0.1:6302", "127.0.0.1:8300")
	require.NoError(t, err)
	require.Equal(t, "n1", o.ServerName)
	require.Equal(t, 4300, o.Port)
	require.Equal(t, 6300, o.Cluster.Port)
	require.Equal(t, "c", o.Cluster.Name)
	require.Equal(t, 8300, o.HTTPPort)
	require.Len(t, o.Routes, 2)
	require.Equal(t, "127.0.0.1:6302", o.Routes[1].Host)
	require.Greater(t, o.MaxPayload, int32(16<<20), "16 MiB bodies, as the embedded server")

	for _, tc := range []struct{ listen, cluster, routes, monitor, want string }{
		{"4300", "", "", "", "--listen \"4300\""},
		{"127.0.0.1:0", "", "", "", "--listen"},
		{"127.0.0.1:4300", "", "nats://127.0.0.1:6301", "", "--routes needs --cluster"},
		{"127.0.0.1:4300", "127.0.0.1:6300", "http://127.0.0.1:6301", "", "--routes"},
		{"127.0.0.1:4300", "127.0.0.1:x", "", "", "--cluster"},
		{"127.0.0.1:4300", "", "", "localhost", "--monitor"},
	} {
		_, err := natsNodeOptions("n", tc.listen, tc.cluster, "c", tc.routes, tc.monitor)
		require.ErrorContains(t, err, tc.want, "%+v", tc)
	}
}
