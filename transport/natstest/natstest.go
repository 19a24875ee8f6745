// Package natstest gives tests a NATS cluster of in-process nats-server
// nodes on loopback (SPEC.md §9: brokers and clients on a NATS cluster).
package natstest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// StartCluster starts n nats-server nodes in this process, clustered by
// routes to the first (cluster "queen-test", random loopback ports), and
// waits until every node has a route to every other. mod, when not nil,
// adjusts each node's options before it starts. The nodes are shut down at
// the test's end.
func StartCluster(t testing.TB, n int, mod func(i int, o *server.Options)) []*server.Server {
	t.Helper()
	var nodes []*server.Server
	t.Cleanup(func() {
		for _, s := range nodes {
			s.Shutdown()
			s.WaitForShutdown()
		}
	})
	for i := range n {
		o := &server.Options{
			ServerName: fmt.Sprintf("queen-test-%d", i),
			Host:       "127.0.0.1",
			Port:       server.RANDOM_PORT,
			// One route per pair of nodes (no pooling): NumRoutes counts
			// the other nodes.
			Cluster: server.ClusterOpts{Name: "queen-test", Host: "127.0.0.1", Port: server.RANDOM_PORT, PoolSize: -1},
			NoSigs:  true,
			NoLog:   true,
		}
		if i > 0 {
			o.Routes = server.RoutesFromStr(fmt.Sprintf("nats://%s", nodes[0].ClusterAddr()))
		}
		if mod != nil {
			mod(i, o)
		}
		s, err := server.NewServer(o)
		if err != nil {
			t.Fatalf("natstest: node %d: %v", i, err)
		}
		s.Start()
		if !s.ReadyForConnections(10 * time.Second) {
			s.Shutdown()
			t.Fatalf("natstest: node %d not ready within 10s", i)
		}
		nodes = append(nodes, s)
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, s := range nodes {
		for s.NumRoutes() < n-1 {
			if time.Now().After(deadline) {
				t.Fatalf("natstest: %s has %d routes, want %d", s.Name(), s.NumRoutes(), n-1)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return nodes
}

// URLs is the nodes' client URLs as one comma-separated list (NATS_URL).
func URLs(nodes []*server.Server) string {
	out := make([]string, len(nodes))
	for i, s := range nodes {
		out[i] = s.ClientURL()
	}
	return strings.Join(out, ",")
}
