package broker

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/transport/client"
	"github.com/queen-mq/queen-go/transport/natstest"
)

// nodeOf is the index of the node nc is connected to (-1: none).
func nodeOf(nodes []*server.Server, nc *nats.Conn) int {
	for i, s := range nodes {
		if s.ID() == nc.ConnectedServerId() {
			return i
		}
	}
	return -1
}

// pushUntilAnswered pushes items through c until every item has a verdict
// (queued, or duplicate when an earlier attempt that timed out stored it),
// and records each item's message id in ids.
func pushUntilAnswered(t *testing.T, c *client.Client, items []client.PushItem, ids map[string]string) {
	t.Helper()
	eventually(t, 60*time.Second, 50*time.Millisecond, "every item answered", func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		rs, err := c.Push(ctx, items)
		if err != nil || len(rs) != len(items) {
			return false, fmt.Sprintf("push: %d replies, %v", len(rs), err)
		}
		for _, r := range rs {
			if r.Status != queen.Queued && r.Status != queen.Duplicate {
				return false, fmt.Sprintf("%s: %s %s", r.TransactionID, r.Status, r.Error)
			}
		}
		for _, r := range rs {
			ids[r.TransactionID] = r.MessageID
		}
		return true, ""
	})
}

// A broker given a 3-node NATS cluster as a comma-separated NATS_URL keeps
// serving its NATS API (the micro service) and its shard subjects after the
// nodes its two connections were on are shut down: the connections move
// to the remaining node with their subscriptions (SPEC.md §9). Pushes sent
// during the switch are retried with the same transactionIds and stay
// exact.
func TestBrokerOnNATSClusterSurvivesNodeLoss(t *testing.T) {
	t.Parallel()
	nodes := natstest.StartCluster(t, 3, nil)
	list := natstest.URLs(nodes)
	if !strings.Contains(list, ",") {
		t.Fatalf("want a list, got %q", list)
	}
	e := startEnv(t, func(c *Config) { c.NATSURL = list })
	lost := map[int]bool{nodeOf(nodes, e.b.nc): true, nodeOf(nodes, e.b.ncShards): true}
	if lost[-1] {
		t.Fatalf("broker connections on nodes %v", lost)
	}
	survivor := 0
	for lost[survivor] {
		survivor++
	}
	nc, err := client.ConnectNATS(nodes[survivor].ClientURL(), "queen-test-client")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	plain := client.NewNATS(nc)
	sharded := client.NewNATS(nc, client.ShardAware(client.ShardOptions{Timeout: 2 * time.Second}))
	ids := map[string]string{}
	pushUntilAnswered(t, plain, spread("natscluster", "before", 8, 16), ids)

	for i := range lost {
		nodes[i].Shutdown()
	}
	after := spread("natscluster", "after", 8, 16)
	pushUntilAnswered(t, plain, after, ids)
	direct := spread("natscluster", "direct", 8, 16)
	pushUntilAnswered(t, sharded, direct, ids)
	// A connection still reconnecting names the server it lost: wait
	// until both have reconnected (within the ping budget).
	// Both connections may have been on one node: then two nodes survive
	// and either may take them.
	eventually(t, 30*time.Second, 20*time.Millisecond, "the broker's connections on surviving nodes", func() (bool, string) {
		a, b := nodeOf(nodes, e.b.nc), nodeOf(nodes, e.b.ncShards)
		ok := a >= 0 && !lost[a] && b >= 0 && !lost[b] && e.b.nc.IsConnected() && e.b.ncShards.IsConnected()
		return ok, fmt.Sprintf("client connection on node %d (%s), shard connection on node %d (%s), lost nodes %v",
			a, e.b.nc.Status(), b, e.b.ncShards.Status(), lost)
	})
	// Every id once: the repeats are duplicates of the originals.
	pushExact(t, plain, after, queen.Duplicate, ids)
	pushExact(t, sharded, direct, queen.Duplicate, ids)
	select {
	case err := <-e.b.Fatal():
		t.Fatalf("the broker reported a fatal error: %v", err)
	default:
	}
}

// A broker whose NATS connection closes for good (here closed under it,
// as when reconnection is refused for good) reports it on Fatal, which
// `queen serve` turns into a loud stop; Stop's own closing does not.
func TestBrokerNATSConnectionClosedIsFatal(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nil)
	e.b.ncShards.Close()
	select {
	case err := <-e.b.Fatal():
		if !strings.Contains(err.Error(), "queen-broker-shards") || !strings.Contains(err.Error(), "closed for good") {
			t.Fatalf("fatal error %q does not name the connection", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no fatal error within 30s of the connection closing")
	}

	quiet := startEnv(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := quiet.b.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-quiet.b.Fatal():
		t.Fatalf("Stop reported a fatal error: %v", err)
	default:
	}
}
