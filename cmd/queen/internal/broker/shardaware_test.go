package broker

// Shard-aware clients in a cluster (SPEC.md §9): the Go client sends each
// shard's items to the shard's subject, so the broker they enter owns them
// and no push hops between brokers. Real brokers, PostgreSQL and NATS;
// conditions are polled with deadlines, never slept for.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/transport/client"
	"github.com/queen-mq/queen-go/transport/wire"
)

// routeMetrics reads each broker's queen_shard_routes_{local,remote}_total.
func routeMetrics(t *testing.T, envs []*env) (local, remote []float64) {
	t.Helper()
	for _, e := range envs {
		local = append(local, e.metricValue(t, "queen_shard_routes_local_total"))
		remote = append(remote, e.metricValue(t, "queen_shard_routes_remote_total"))
	}
	return local, remote
}

// spread is n items over parts partitions of queue, round robin, with
// transaction ids prefix-0, prefix-1, ...
func spread(queue, prefix string, parts, n int) []client.PushItem {
	out := make([]client.PushItem, n)
	for i := range out {
		out[i] = client.PushItem{Queue: queue, Partition: fmt.Sprintf("p%d", i%parts),
			TransactionID: fmt.Sprintf("%s-%d", prefix, i), Payload: []byte(fmt.Sprintf(`{"i":%d}`, i))}
	}
	return out
}

// pushExact pushes items through c and checks one verdict per item in
// request order, each want, with the message ids of ids when known (and
// records them when not). Items answered failed (retryable: a hop or a
// commit that did not finish in time on a busy machine) are sent again
// with the same transaction ids, as a client does, until they get a
// verdict; a retried item that was stored after all is duplicate with the
// original's id.
func pushExact(t *testing.T, c *client.Client, items []client.PushItem, want queen.Verdict, ids map[string]string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	idx := make([]int, len(items))
	for i := range idx {
		idx[i] = i
	}
	for attempt := 0; len(idx) > 0; attempt++ {
		send := make([]client.PushItem, len(idx))
		for j, i := range idx {
			send[j] = items[i]
		}
		rs, err := c.Push(ctx, send)
		if len(rs) != len(send) {
			t.Fatalf("push of %d items (attempt %d): %d replies, %v", len(send), attempt, len(rs), err)
		}
		var again []int
		for j, r := range rs {
			i, txn := idx[j], send[j].TransactionID
			if r.Index != j || r.TransactionID != txn {
				t.Fatalf("item %d (%s): index %d, transaction id %s", i, txn, r.Index, r.TransactionID)
			}
			if r.Status == queen.Failed {
				if ctx.Err() != nil {
					t.Fatalf("item %d (%s): still failed at the deadline: %s %s", i, txn, r.Code, r.Error)
				}
				again = append(again, i)
				continue
			}
			if r.Status != want && (attempt == 0 || want != queen.Queued || r.Status != queen.Duplicate) {
				t.Fatalf("item %d (%s, attempt %d): %s (%s), want %s", i, txn, attempt, r.Status, r.Error, want)
			}
			if id, ok := ids[txn]; ok && id != r.MessageID {
				t.Fatalf("item %d (%s): message id %s, the original is %s", i, txn, r.MessageID, id)
			}
			ids[txn] = r.MessageID
		}
		if len(again) > 0 {
			t.Logf("%d of %d items failed (retryable); sending them again", len(again), len(idx))
		}
		idx = again
	}
}

// TestClusterPlainPushHopsOncePerOwner: in a 3-broker cluster a plain
// client's push (queen.v1.push, entering any broker) spanning most shards
// makes at most one hop to each other broker, carrying every shard that
// broker owns: queen_shard_hops_total, summed over the brokers, grows by at
// most 2 for the push, while queen_shard_routes_remote_total counts the
// shard groups those hops carried, many per hop. Then every item is stored
// once: the push again (and any item that failed) is answered with
// verdicts the original ids agree with.
func TestClusterPlainPushHopsOncePerOwner(t *testing.T) {
	t.Parallel()
	envs := startCluster(t, 3, 2*time.Second)
	eventually(t, 30*time.Second, 20*time.Millisecond, "three brokers share the shards", func() (bool, string) { return settled(t, envs, 3) })
	sum := func(name string) (n float64) {
		for _, e := range envs {
			n += e.metricValue(t, name)
		}
		return n
	}
	hops0, groups0 := sum("queen_shard_hops_total"), sum("queen_shard_routes_remote_total")
	c := client.NewNATS(envs[0].nc)
	bundle := spread("plainhops", "t", 96, 192) // 96 partitions: most of the 64 shards
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rs, err := c.Push(ctx, bundle) // one push, counted whatever its verdicts
	if len(rs) != len(bundle) {
		t.Fatalf("push of %d items: %d replies, %v", len(bundle), len(rs), err)
	}
	hops, groups := sum("queen_shard_hops_total")-hops0, sum("queen_shard_routes_remote_total")-groups0
	t.Logf("one push: %v hops carrying %v shard groups", hops, groups)
	if hops < 1 || hops > 2 {
		t.Fatalf("one push made %v hops: want one per other broker owning some of its shards (2 here)", hops)
	}
	if groups < 3*hops {
		t.Fatalf("%v hops carried %v shard groups: want many shards a hop", hops, groups)
	}
	// Each item answered queued is stored once: sent again it is a
	// duplicate with the same id. (An item the busy machine answered
	// failed, retryable, is left out.)
	ids := map[string]string{}
	var queued []client.PushItem
	for i, r := range rs {
		switch r.Status {
		case queen.Queued:
			ids[r.TransactionID] = r.MessageID
			queued = append(queued, bundle[i])
		case queen.Failed:
		default:
			t.Fatalf("item %d (%s): %s, want queued (or failed, retryable)", i, r.TransactionID, r.Status)
		}
	}
	if len(queued) == 0 {
		t.Fatal("no item of the push was queued")
	}
	pushExact(t, c, queued, queen.Duplicate, ids)
}

// TestClusterShardAwarePublishCrossesNoHop: in a 3-broker cluster a
// shard-aware client's pushes, synchronous and through the async producer,
// enter at each item's owner: queen_shard_routes_remote_total stays 0 on
// every broker while queen_shard_routes_local_total grows on each; repeats
// are duplicate with the original ids and nothing is stored twice.
func TestClusterShardAwarePublishCrossesNoHop(t *testing.T) {
	t.Parallel()
	envs := startCluster(t, 3, 2*time.Second)
	eventually(t, 30*time.Second, 20*time.Millisecond, "three brokers share the shards", func() (bool, string) { return settled(t, envs, 3) })
	local0, remote0 := routeMetrics(t, envs)

	// A long shard timeout: a slow answer on a busy machine is waited for,
	// not sent again through queen.v1.push (which would hop).
	c := client.NewNATS(envs[0].nc, client.ShardAware(client.ShardOptions{Timeout: 45 * time.Second}))
	const q = "shardaware"
	ids := map[string]string{}
	bundle := spread(q, "sync", 48, 96) // every broker owns some of 48 partitions
	pushExact(t, c, bundle, queen.Queued, ids)
	pushExact(t, c, bundle, queen.Duplicate, ids)
	pushExact(t, c, bundle[5:6], queen.Duplicate, ids)

	// The async producer over the same client: single items, and repeats
	// of the bundle's, resolved exactly.
	p := client.NewProducer(c, client.ProducerOptions{Linger: time.Millisecond, MaxBatchItems: 50})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	single := spread(q, "async", 32, 300)
	var pend []*client.Pending
	for _, it := range append(append([]client.PushItem{}, single...), bundle[:40]...) {
		pd, err := p.Publish(ctx, it)
		if err != nil {
			t.Fatal(err)
		}
		pend = append(pend, pd)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for i, pd := range pend {
		r, err := pd.Result()
		want := queen.Queued
		if i >= len(single) {
			want = queen.Duplicate
		}
		if err != nil || r.Status != want {
			t.Fatalf("published item %d: %s %v, want %s", i, r.Status, err, want)
		}
		if id, ok := ids[r.TransactionID]; ok && id != r.MessageID {
			t.Fatalf("published item %d (%s): message id %s, the original is %s", i, r.TransactionID, r.MessageID, id)
		}
		ids[r.TransactionID] = r.MessageID
	}

	local1, remote1 := routeMetrics(t, envs)
	for i := range envs {
		if remote0[i] != 0 || remote1[i] != 0 {
			t.Fatalf("broker %d: queen_shard_routes_remote_total %v then %v, want 0: a push hopped", i, remote0[i], remote1[i])
		}
		if local1[i] <= local0[i] {
			t.Fatalf("broker %d: queen_shard_routes_local_total %v then %v: it served none of the pushes", i, local0[i], local1[i])
		}
	}
	st := c.ShardStats()
	if st.Unsplit != 0 || st.Fallback != 0 || st.Split == 0 || st.Groups < st.Split {
		t.Fatalf("shard stats %+v: want every push split, no fallback", st)
	}
	for txn, n := range txnCounts(envs[0].frames(t, q, "")) {
		if n != 1 {
			t.Fatalf("%s stored %d times", txn, n)
		}
	}
	if n := len(txnCounts(envs[0].frames(t, q, ""))); n != len(bundle)+len(single) {
		t.Fatalf("%d transaction ids stored, want %d", n, len(bundle)+len(single))
	}
	t.Logf("shard-aware: routes local %v -> %v, remote %v; client %+v", local0, local1, remote1, st)

	// The same bundle through a plain client enters at one broker, which
	// sends the shards it does not own to their owners: the metric sees
	// those hops.
	plain := client.NewNATS(envs[0].nc)
	pushExact(t, plain, bundle, queen.Duplicate, ids)
	local2, remote2 := routeMetrics(t, envs)
	hops := 0.0
	for i := range envs {
		hops += remote2[i]
	}
	if hops == 0 {
		t.Fatalf("a plain client's push of %d partitions made no hop: routes remote %v", 48, remote2)
	}
	t.Logf("plain client, one push of 96 items over 48 partitions: routes local %v -> %v, remote %v -> %v", local1, local2, remote1, remote2)
}

// TestClusterShardAwareFallback: a shard subject nobody answers has its
// items sent through queen.v1.push, and every item still gets its exact
// verdict: shards the client believes exist but no broker serves (a wrong
// shard count), and the shards of a broker that died holding their leases.
func TestClusterShardAwareFallback(t *testing.T) {
	t.Parallel()
	envs := startCluster(t, 3, 2*time.Second)
	eventually(t, 30*time.Second, 20*time.Millisecond, "three brokers share the shards", func() (bool, string) { return settled(t, envs, 3) })

	// Twice the real count: shards 64..127 have no responder.
	wrong := client.NewNATS(envs[1].nc, client.ShardAware(client.ShardOptions{Count: 2 * envs[0].b.cfg.ShardCount}))
	const q = "fallback"
	ids := map[string]string{}
	bundle := spread(q, "w", 40, 80)
	pushExact(t, wrong, bundle, queen.Queued, ids)
	pushExact(t, wrong, bundle, queen.Duplicate, ids)
	if st := wrong.ShardStats(); st.Fallback == 0 || st.Split < 2 || st.Unsplit != 0 {
		t.Fatalf("shard stats %+v: want split pushes with fallbacks", st)
	}

	// c dies: it stops renewing and goes away without releasing its
	// shards; until they are re-owned their subjects have no responder.
	dead := envs[2]
	dead.b.members.Abandon()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := dead.b.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	c := client.NewNATS(envs[0].nc, client.ShardAware(client.ShardOptions{}))
	after := spread(q, "after", 40, 80)
	pushExact(t, c, after, queen.Queued, ids)
	pushExact(t, c, append(after, bundle...), queen.Duplicate, ids)
	for txn, n := range txnCounts(envs[0].frames(t, q, "")) {
		if n != 1 {
			t.Fatalf("%s stored %d times", txn, n)
		}
	}
	t.Logf("after the kill: client %+v", c.ShardStats())
}

// TestShardSubjectAnswersClientsAsThePublicPush: a client's push on a shard
// subject (Content-Type: application/json) is validated and answered
// exactly as on queen.v1.push: the same 4xx for bad input, nothing written
// (SPEC.md §10, §11); and the internal encoding's subject refuses a body
// that is neither.
func TestShardSubjectAnswersClientsAsThePublicPush(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nil)
	ask := func(subject string, body []byte, header bool) (string, string) {
		t.Helper()
		m := nats.NewMsg(subject)
		if header {
			m.Header.Set("Content-Type", "application/json")
		}
		m.Data = body
		r, err := e.nc.RequestMsg(m, 30*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", subject, err)
		}
		return r.Header.Get("Nats-Service-Error-Code"), string(r.Data)
	}
	shard := wire.ShardPushSubject(queen.ShardOf("direct", "p", e.b.cfg.ShardCount))
	for _, body := range []string{
		`{"items":[{"queue":"direct","partition":"p","transactionId":"a"},{"queue":"direct","partition":"p","transactionId":"b\u0001"}]}`,
		`{"items":[{"queue":"direct","partition":"p","payload":{"x":"\ud800"}}]}`,
		`{"items":[{"partition":"p"}]}`,
		`{"items":[{"queue":"direct","partition":"p",}]}`,
		`{"items":{}}`,
		"{\"items\":[{\"queue\":\"direct\xff\"}]}",
	} {
		pubStatus, pubBody := ask(wire.SubjectPush, []byte(body), false)
		status, got := ask(shard, []byte(body), true)
		if pubStatus == "" || !strings.HasPrefix(pubStatus, "4") || status != pubStatus || got != pubBody {
			t.Fatalf("body %s:\n queen.v1.push answered %s %s\n %s answered %s %s", body, pubStatus, pubBody, shard, status, got)
		}
	}
	if n := len(e.frames(t, "direct", "")); n != 0 {
		t.Fatalf("%d messages stored from refused pushes", n)
	}
	status, got := ask(shard, []byte(`{"items":[{"queue":"direct","partition":"p","transactionId":"ok"}]}`), true)
	if status != "" || !strings.Contains(got, `"status":"queued"`) {
		t.Fatalf("a good push on %s: %s %s", shard, status, got)
	}
	status, got = ask(shard, []byte(`{"items":[{"queue":"direct","partition":"p","transactionId":"ok"}]}`), false)
	if status != "400" || !strings.Contains(got, `"code":"invalid_json"`) {
		t.Fatalf("the public body without its header on %s: %s %s", shard, status, got)
	}
}
