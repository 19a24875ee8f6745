package target

import (
	"testing"

	"github.com/queen-mq/queen-go/transport/natstest"
)

// TestConnectSpread: with a list of a cluster's servers, client i starts
// at node i mod the nodes (the list rotated, not shuffled), so the load's
// clients are spread evenly; a single URL is used as it is.
func TestConnectSpread(t *testing.T) {
	t.Parallel()
	nodes := natstest.StartCluster(t, 3, nil)
	list := natstest.URLs(nodes)
	for i := range 7 {
		nc, err := ConnectSpread(list, i, "queen-loadtest-spread")
		if err != nil {
			t.Fatal(err)
		}
		if got, want := nc.ConnectedServerId(), nodes[i%3].ID(); got != want {
			t.Errorf("client %d on server %s, want node %d (%s)", i, got, i%3, want)
		}
		nc.Close()
	}
	nc, err := ConnectSpread(nodes[2].ClientURL(), 0, "queen-loadtest-spread")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if nc.ConnectedServerId() != nodes[2].ID() {
		t.Errorf("a single URL: connected to %s, want node 2", nc.ConnectedServerId())
	}
	if _, err := ConnectSpread("nats://127.0.0.1:1,http://x", 0, "x"); err == nil {
		t.Error("a bad list connected")
	}
}
