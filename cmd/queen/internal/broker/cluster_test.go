package broker

// Cluster tests (SPEC.md §9): brokers in-process sharing one database and one
// NATS server, with short shard leases. Conditions are polled with
// deadlines, never slept for.

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/shards"
	"github.com/queen-mq/queen-go/transport/client"
)

// startCluster starts n brokers on one fresh database; the first runs the
// embedded NATS server the others join.
func startCluster(t *testing.T, n int, lease time.Duration) []*env {
	t.Helper()
	first := startEnv(t, func(c *Config) { c.ShardLease = lease })
	out := []*env{first}
	for len(out) < n {
		out = append(out, joinCluster(t, first, lease))
	}
	return out
}

func joinCluster(t *testing.T, first *env, lease time.Duration) *env {
	t.Helper()
	return startEnvOn(t, first.url, func(c *Config) { c.NATSURL = first.b.NATSURL(); c.ShardLease = lease })
}

func (e *env) id() string { return e.b.members.ID() }

// clusterView reads GET /api/v1/cluster.
func (e *env) clusterView(t testing.TB) queen.ClusterView {
	t.Helper()
	st, body := e.httpDo(t, http.MethodGet, "/api/v1/cluster", nil)
	if st != http.StatusOK {
		t.Fatalf("GET /api/v1/cluster: %d %s", st, body)
	}
	var v queen.ClusterView
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("decode the cluster view %s: %v", clip(body), err)
	}
	return v
}

// liveOwners counts the shards each broker holds a live lease on, from the
// database; "" counts shards with no live owner.
func liveOwners(v queen.ClusterView) map[string]int {
	out := map[string]int{}
	for _, l := range v.Shards {
		if l.Live {
			out[l.Owner]++
		} else {
			out[""]++
		}
	}
	return out
}

// settled reports whether every shard has a live owner among envs, each
// holds shards/len(envs) ± slack, each serves exactly the shards it holds,
// and every broker routes every shard to that owner.
func settled(t testing.TB, envs []*env, slack int) (bool, string) {
	v := envs[0].clusterView(t)
	counts := liveOwners(v)
	if counts[""] > 0 {
		return false, fmt.Sprintf("%d shards without a live owner: %v", counts[""], counts)
	}
	fair := v.ShardCount / len(envs)
	for _, e := range envs {
		if n := counts[e.id()]; n < fair-slack || n > fair+slack {
			return false, fmt.Sprintf("broker %s holds %d shards, want %d±%d: %v", e.id(), n, fair, slack, counts)
		}
		if held, serving := e.b.members.Held(), e.b.shardSrv.Serving(); !slices.Equal(held, serving) {
			return false, fmt.Sprintf("broker %s holds %v but serves %v", e.id(), held, serving)
		}
	}
	for _, e := range envs {
		seen := e.b.members.Owners()
		for _, l := range v.Shards {
			if seen[l.Shard] != l.Owner {
				return false, fmt.Sprintf("broker %s routes shard %d to %q, its owner is %q", e.id(), l.Shard, seen[l.Shard], l.Owner)
			}
		}
	}
	return true, ""
}

// partitionOwnedBy returns a partition name of queue whose shard e holds.
func partitionOwnedBy(t testing.TB, e *env, queue, prefix string) (string, int) {
	t.Helper()
	held := e.b.members.Held()
	for i := 0; i < 10000; i++ {
		name := fmt.Sprintf("%s%d", prefix, i)
		n := queen.ShardOf(queue, name, e.b.cfg.ShardCount)
		if slices.Contains(held, n) {
			return name, n
		}
	}
	t.Fatalf("no partition of %s lands on the %d shards of broker %s", queue, len(held), e.id())
	return "", 0
}

func commits(envs []*env) []uint64 {
	out := make([]uint64, len(envs))
	for i, e := range envs {
		out[i] = e.b.Commits()
	}
	return out
}

// TestClusterPushAndRepeatThroughAnotherBroker: three brokers split the
// shards; a push entering at one broker and its repeat entering at another
// are answered queued then duplicate with the same message id, whichever
// broker owns the partition. The owner's partition actor commits both: the
// entry brokers only route.
func TestClusterPushAndRepeatThroughAnotherBroker(t *testing.T) {
	t.Parallel()
	// A 6 s shard lease (renewed every 2 s): the commit counts below need
	// every owner to keep its shards throughout, which a renew tick that a
	// busy machine delays past a 2 s lease would not guarantee.
	envs := startCluster(t, 3, 6*time.Second)
	eventually(t, 30*time.Second, 20*time.Millisecond, "three brokers share the shards", func() (bool, string) { return settled(t, envs, 3) })

	// One partition per owner: pushed at the next broker, repeated at the
	// one after; only the owner commits.
	const q = "xbroker"
	for o, owner := range envs {
		part, _ := partitionOwnedBy(t, owner, q, "own")
		entry, repeat := envs[(o+1)%3], envs[(o+2)%3]
		before := commits(envs)
		first := entry.pushOK(t, "http", items(it(q, part, "order-"+part)), 1)
		again := repeat.pushOK(t, "nats", items(it(q, part, "order-"+part)), 1)
		wantStatuses(t, first, "queued")
		wantStatuses(t, again, "duplicate")
		if again[0].MessageID != first[0].MessageID {
			t.Fatalf("repeat through broker %d answered message id %s, the original is %s", (o+2)%3, again[0].MessageID, first[0].MessageID)
		}
		after := commits(envs)
		for i := range envs {
			want := uint64(0)
			if i == o {
				want = 2
			}
			if after[i]-before[i] != want {
				t.Fatalf("partition %s (owner broker %d, entered at %d then %d): broker %d ran %d commits, want %d", part, o, (o+1)%3, (o+2)%3, i, after[i]-before[i], want)
			}
		}
	}

	// Many partitions, each pushed at one broker and repeated at the two
	// others, over both transports.
	var originals []item
	for p := 0; p < 48; p++ {
		originals = append(originals, it(q, fmt.Sprintf("p%d", p), fmt.Sprintf("m%d", p)))
	}
	ids := map[string]string{}
	for p, o := range originals {
		rs := envs[p%3].pushOK(t, transports[p%2], items(o), 1)
		wantStatuses(t, rs, "queued")
		ids[rs[0].TransactionID] = rs[0].MessageID
	}
	for k := 1; k <= 2; k++ {
		for p, o := range originals {
			rs := envs[(p+k)%3].pushOK(t, transports[(p+k)%2], items(o), 1)
			wantStatuses(t, rs, "duplicate")
			if rs[0].MessageID != ids[rs[0].TransactionID] {
				t.Fatalf("%s repeated at broker %d: message id %s, the original is %s", rs[0].TransactionID, (p+k)%3, rs[0].MessageID, ids[rs[0].TransactionID])
			}
		}
	}
	// A bundle spanning every owner, entered at one broker: verdicts in
	// request order.
	bundle := append(slices.Clone(originals), it(q, "p0", "fresh-0"), it(q, "p1", "fresh-1"))
	rs := envs[1].pushOK(t, "nats", items(bundle...), len(bundle))
	for i, r := range rs {
		want := "duplicate"
		if i >= len(originals) {
			want = "queued"
		} else if r.MessageID != ids[r.TransactionID] {
			t.Fatalf("bundle item %d: message id %s, want %s", i, r.MessageID, ids[r.TransactionID])
		}
		if r.Status != want || r.TransactionID != bundle[i]["transactionId"] {
			t.Fatalf("bundle item %d: %s %s, want %s %s", i, r.Status, r.TransactionID, want, bundle[i]["transactionId"])
		}
	}
	for txn, n := range txnCounts(envs[0].frames(t, q, "")) {
		if n != 1 {
			t.Fatalf("%s stored %d times", txn, n)
		}
	}
	for i, e := range envs {
		if s := e.b.router.Stats(); s.Remote == 0 || s.Local == 0 {
			t.Fatalf("broker %d routed %+v: want hops to other owners and pushes served here", i, s)
		}
	}
}

// TestClusterRebalanceAndTakeover: a broker alone holds and serves every
// shard; two more join and each ends with about a third; one is killed
// (stops renewing without releasing) and its shards are re-owned by the
// others within the lease; one stops cleanly and its shards move at once.
func TestClusterRebalanceAndTakeover(t *testing.T) {
	t.Parallel()
	const lease = 2 * time.Second
	a := startEnv(t, func(c *Config) { c.ShardLease = lease })
	if held := a.b.members.Held(); len(held) != shards.DefaultCount {
		t.Fatalf("a broker alone holds %d shards once started, want %d", len(held), shards.DefaultCount)
	}
	if serving := a.b.shardSrv.Serving(); len(serving) != shards.DefaultCount {
		t.Fatalf("a broker alone serves %d shard subjects, want %d", len(serving), shards.DefaultCount)
	}
	b := joinCluster(t, a, lease)
	c := joinCluster(t, a, lease)
	envs := []*env{a, b, c}
	eventually(t, 30*time.Second, 20*time.Millisecond, "three brokers share the shards", func() (bool, string) { return settled(t, envs, 3) })

	// The cluster view, over HTTP and NATS, from any broker. Every broker
	// and lease in it is live; polled, because a renew tick that a busy
	// machine delays past the 2 s lease lets a lease lapse until the next.
	v := c.clusterView(t)
	if v.Self != c.id() || v.ShardCount != shards.DefaultCount || v.LeaseSeconds != lease.Seconds() || len(v.Shards) != v.ShardCount {
		t.Fatalf("cluster view: self %s shards %d lease %v, %d leases", v.Self, v.ShardCount, v.LeaseSeconds, len(v.Shards))
	}
	eventually(t, 30*time.Second, 20*time.Millisecond, "a view with every broker and lease live", func() (bool, string) {
		v := c.clusterView(t)
		byID := map[string]queen.ClusterNode{}
		for _, n := range v.Brokers {
			byID[n.ID] = n
		}
		for _, e := range envs {
			n, ok := byID[e.id()]
			if !ok || !n.Live || n.HTTPURL != e.base || !n.ExpiresAt.After(v.Now) || n.Shards < 18 {
				return false, fmt.Sprintf("broker %s in the view: %+v (present %v)", e.id(), n, ok)
			}
		}
		for _, l := range v.Shards {
			if !l.Live || !l.ExpiresAt.After(v.Now) || l.ExpiresAt.Sub(v.Now) > lease || l.AcquiredAt == nil {
				return false, fmt.Sprintf("shard %d lease %+v at %v", l.Shard, l, v.Now)
			}
		}
		return true, ""
	})
	msg, err := a.nc.Request("queen.v1.cluster", nil, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var nv queen.ClusterView
	if err := json.Unmarshal(msg.Data, &nv); err != nil || len(nv.Shards) != shards.DefaultCount || len(nv.Brokers) != 3 {
		t.Fatalf("queen.v1.cluster: %v %s", err, clip(msg.Data))
	}

	// Kill c: it stops renewing and goes away without releasing anything.
	c.b.members.Abandon()
	dead := c.clusterView(t)
	orphans := map[int]time.Time{} // shard -> its lease's last expiry (PostgreSQL's clock)
	for _, l := range dead.Shards {
		if l.Owner == c.id() {
			orphans[l.Shard] = l.ExpiresAt
		}
	}
	killed := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.b.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	// Until they are re-owned, pushes to c's shards are served by the broker
	// they enter (no responder on c's subjects).
	part, _ := partitionOwnedByID(t, dead, "after-kill", c.id())
	wantStatuses(t, a.pushOK(t, "http", items(it("after-kill", part, "k1")), 1), "queued")
	wantStatuses(t, b.pushOK(t, "nats", items(it("after-kill", part, "k1")), 1), "duplicate")

	survivors := []*env{a, b}
	eventually(t, lease+10*time.Second, 10*time.Millisecond, "the killed broker's shards are re-owned", func() (bool, string) {
		counts := liveOwners(a.clusterView(t))
		if counts[a.id()]+counts[b.id()] != shards.DefaultCount {
			return false, fmt.Sprintf("%v", counts)
		}
		return true, ""
	})
	took := time.Since(killed)
	after := a.clusterView(t)
	for n, expiry := range orphans {
		l := after.Shards[n]
		// No lease is taken while it is live: every orphan is re-owned at
		// or after its own expiry (both on PostgreSQL's clock). How soon
		// after is logged, not asserted: claims run every lease/3 and a
		// busy machine may delay them.
		if l.AcquiredAt == nil || l.AcquiredAt.Before(expiry) {
			t.Fatalf("shard %d of the killed broker re-owned at %v, its lease ran until %v", n, l.AcquiredAt, expiry)
		}
	}
	t.Logf("the killed broker's %d shards were re-owned %v after the kill (lease %v)", len(orphans), took, lease)
	eventually(t, 30*time.Second, 20*time.Millisecond, "two brokers share the shards", func() (bool, string) { return settled(t, survivors, 1) })
	wantStatuses(t, b.pushOK(t, "http", items(it("after-kill", part, "k1")), 1), "duplicate")

	// b stops cleanly: its leases are released by the time Stop returns
	// (none is still live and b's), and a takes them on its next tick,
	// without waiting for them to run out. How long that took is logged,
	// not asserted (a busy machine may delay a's tick).
	stopped := time.Now()
	if err := b.b.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	for _, l := range a.clusterView(t).Shards {
		if l.Owner == b.id() && l.Live {
			t.Fatalf("shard %d is still live and b's after b stopped cleanly: %+v", l.Shard, l)
		}
	}
	eventually(t, 30*time.Second, 5*time.Millisecond, "a takes the stopped broker's shards", func() (bool, string) {
		if n := len(a.b.members.Held()); n != shards.DefaultCount {
			return false, fmt.Sprintf("a holds %d", n)
		}
		return true, ""
	})
	t.Logf("a cleanly stopped broker's shards moved in %v", time.Since(stopped))
	wantStatuses(t, a.pushOK(t, "nats", items(it("after-kill", part, "k1"), it("after-kill", part, "k2")), 2), "duplicate", "queued")
}

// partitionOwnedByID returns a partition name of queue whose shard the view
// gives to owner.
func partitionOwnedByID(t testing.TB, v queen.ClusterView, queue, owner string) (string, int) {
	t.Helper()
	for i := 0; i < 10000; i++ {
		name := fmt.Sprintf("p%d", i)
		n := queen.ShardOf(queue, name, v.ShardCount)
		if v.Shards[n].Owner == owner {
			return name, n
		}
	}
	t.Fatalf("no partition of %s lands on a shard of %s", queue, owner)
	return "", 0
}

// TestClusterDualOwnershipExactVerdicts forces two owners for one partition:
// broker b stops renewing (a pause: it keeps serving and routing as it last
// saw) and a claims b's shards once the lease ran out, so both run the
// partition's actor with their own caches. 1,000 concurrent pushes, half of
// them repeats, split across the two: every transaction id is stored once,
// every repeat is a duplicate carrying the original's message id.
func TestClusterDualOwnershipExactVerdicts(t *testing.T) {
	t.Parallel()
	envs := startCluster(t, 2, time.Second)
	a, b := envs[0], envs[1]
	eventually(t, 30*time.Second, 20*time.Millisecond, "two brokers share the shards", func() (bool, string) { return settled(t, envs, 1) })
	const q = "dual"
	part, shard := partitionOwnedBy(t, b, q, "d")
	// Warm both caches on the partition before the split.
	wantStatuses(t, b.pushOK(t, "http", items(it(q, part, "warm-b")), 1), "queued")

	b.b.members.Abandon()
	eventually(t, 20*time.Second, 10*time.Millisecond, "a claims b's shards", func() (bool, string) {
		return slices.Contains(a.b.members.Held(), shard), fmt.Sprintf("a holds %v", a.b.members.Held())
	})
	if a.b.members.RemoteOwner(shard) != "" || b.b.members.RemoteOwner(shard) != "" {
		t.Fatalf("shard %d: a routes it to %q, b routes it to %q; want both to serve it", shard, a.b.members.RemoteOwner(shard), b.b.members.RemoteOwner(shard))
	}
	if !slices.Contains(b.b.members.Held(), shard) {
		t.Fatalf("b no longer believes it holds shard %d", shard)
	}
	wantStatuses(t, a.pushOK(t, "http", items(it(q, part, "warm-a")), 1), "queued")

	const unique = 500
	type push struct {
		via *env
		tr  string
		txn string
	}
	var pushes []push
	for i := 0; i < unique; i++ {
		txn := fmt.Sprintf("dual-%d", i)
		first, second := a, b
		if i%2 == 1 {
			first, second = b, a
		}
		pushes = append(pushes, push{first, transports[i%2], txn}, push{second, transports[(i+1)%2], txn})
	}
	rand.New(rand.NewSource(7)).Shuffle(len(pushes), func(i, j int) { pushes[i], pushes[j] = pushes[j], pushes[i] })
	before := commits(envs)
	replies := make([]reply, len(pushes))
	errs := make([]error, len(pushes))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 100)
	for i, p := range pushes {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			r, err := p.via.tryPush(ctx, p.tr, items(it(q, part, p.txn)))
			switch {
			case err != nil:
				errs[i] = err
			case r.Status != http.StatusCreated || len(r.Items) != 1:
				errs[i] = fmt.Errorf("status %d: %s", r.Status, clip(r.Raw))
			default:
				replies[i] = r.Items[0]
			}
		}()
	}
	wg.Wait()
	after := commits(envs)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("push %d (%s through %s): %v", i, pushes[i].txn, pushes[i].via.id(), err)
		}
	}
	if after[0] == before[0] || after[1] == before[1] {
		t.Fatalf("commits during the run: a %d, b %d; want both brokers to run the partition's actor", after[0]-before[0], after[1]-before[1])
	}
	queued, dups := map[string]string{}, map[string][]string{}
	for i, r := range replies {
		if r.TransactionID != pushes[i].txn || r.Partition != part {
			t.Fatalf("push %d answered for %s/%s, sent %s/%s", i, r.Partition, r.TransactionID, part, pushes[i].txn)
		}
		switch r.Status {
		case "queued":
			if prev, ok := queued[r.TransactionID]; ok {
				t.Fatalf("%s answered queued twice (%s and %s)", r.TransactionID, prev, r.MessageID)
			}
			queued[r.TransactionID] = r.MessageID
		case "duplicate":
			dups[r.TransactionID] = append(dups[r.TransactionID], r.MessageID)
		default:
			t.Fatalf("push %d (%s): %s %s %s", i, r.TransactionID, r.Status, r.Code, r.Error)
		}
	}
	if len(queued) != unique {
		t.Fatalf("%d transaction ids answered queued, want %d", len(queued), unique)
	}
	for txn, ids := range dups {
		if len(ids) != 1 || ids[0] != queued[txn] {
			t.Fatalf("%s: duplicates %v, the original is %s", txn, ids, queued[txn])
		}
	}
	stored := txnCounts(a.frames(t, q, part))
	if len(stored) != unique+2 {
		t.Fatalf("%d transaction ids stored, want %d", len(stored), unique+2)
	}
	for txn, n := range stored {
		if n != 1 {
			t.Fatalf("%s stored %d times", txn, n)
		}
	}
	for _, f := range a.frames(t, q, part) {
		if id, ok := queued[f.TransactionID]; ok && id != f.MessageID.String() {
			t.Fatalf("%s stored with message id %s, answered %s", f.TransactionID, f.MessageID, id)
		}
	}
	t.Logf("dual ownership: a ran %d commits, b ran %d", after[0]-before[0], after[1]-before[1])
}

// TestClusterShardCountFixedAtCreation: the first broker on a database fixes
// the shard count; a broker configured with another count refuses to start,
// one configured with none adopts it.
func TestClusterShardCountFixedAtCreation(t *testing.T) {
	t.Parallel()
	a := startEnv(t, func(c *Config) { c.ShardCount = 8 })
	if got := len(a.b.members.Held()); got != 8 {
		t.Fatalf("a new cluster of 8 shards: the broker holds %d", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := Start(ctx, Config{DatabaseURL: a.url, NATSURL: a.b.NATSURL(), HTTPAddr: "127.0.0.1:0", DataDir: t.TempDir(), ShardCount: 64, Logger: quietLogger()})
	if err == nil || !strings.Contains(err.Error(), "has 8 shards") {
		t.Fatalf("a broker configured for 64 shards on a cluster of 8 started (err %v)", err)
	}
	b := startEnvOn(t, a.url, func(c *Config) { c.NATSURL = a.b.NATSURL() })
	if b.b.cfg.ShardCount != 8 {
		t.Fatalf("a broker with no count adopted %d shards, want 8", b.b.cfg.ShardCount)
	}
	eventually(t, 30*time.Second, 20*time.Millisecond, "two brokers share 8 shards", func() (bool, string) { return settled(t, []*env{a, b}, 0) })
	rs := b.pushOK(t, "http", items(it("eight", "x", "t"), it("eight", "y", "t")), 2)
	wantStatuses(t, rs, "queued", "queued")
	wantStatuses(t, a.pushOK(t, "nats", items(it("eight", "x", "t"), it("eight", "y", "t")), 2), "duplicate", "duplicate")
}

// TestClusterGracefulStopUnderLoad: one broker of three stops gracefully
// while clients push over NATS: it stops taking requests, finishes what it
// has, hands its shards over, and no client sees an error or a failed item.
func TestClusterGracefulStopUnderLoad(t *testing.T) {
	t.Parallel()
	// Hops get a long bound: on a busy machine a hop can take longer than
	// the default 2 s and answer its items failed (outcome unknown), which
	// is not what this test is about (a graceful stop hands shards over
	// without any client-visible error).
	first := startEnv(t, func(c *Config) { c.ShardLease, c.HopTimeout = 2*time.Second, 30*time.Second })
	bs := []*env{first}
	for len(bs) < 3 {
		bs = append(bs, startEnvOn(t, first.url, func(c *Config) {
			c.NATSURL, c.ShardLease, c.HopTimeout = first.b.NATSURL(), 2*time.Second, 30*time.Second
		}))
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		owners := liveOwners(bs[0].clusterView(t))
		if owners[""] == 0 && owners[bs[2].id()] > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("shards never spread: %v", owners)
		}
		time.Sleep(20 * time.Millisecond)
	}
	c := client.NewNATS(bs[0].nc)
	var (
		mu       sync.Mutex
		problems []string
		pushed   int
		stopped  = make(chan struct{})
		after    int // pushes completed after the stop finished
	)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ctx.Err() == nil; n++ {
				var its []client.PushItem
				for i := 0; i < 20; i++ {
					its = append(its, client.PushItem{Queue: "gs", Partition: fmt.Sprintf("p%d", i%16), TransactionID: fmt.Sprintf("w%d-%d-%d", w, n, i)})
				}
				rs, err := c.Push(ctx, its)
				mu.Lock()
				if err != nil {
					problems = append(problems, err.Error())
				}
				for _, r := range rs {
					if r.Status != queen.Queued {
						problems = append(problems, fmt.Sprintf("%s: %s %s", r.TransactionID, r.Status, r.Error))
					}
				}
				pushed++
				select {
				case <-stopped:
					after++
				default:
				}
				done := after >= 40
				mu.Unlock()
				if done {
					return
				}
			}
		}()
	}
	for {
		mu.Lock()
		n := pushed
		mu.Unlock()
		if n >= 40 {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the pushes never got going")
		}
		time.Sleep(5 * time.Millisecond)
	}
	sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
	if err := bs[2].b.Stop(sctx); err != nil {
		t.Errorf("graceful stop: %v", err)
	}
	scancel()
	close(stopped)
	wg.Wait()
	if len(problems) > 0 {
		t.Fatalf("%d client-visible problems around the graceful stop, e.g. %v", len(problems), problems[:min(5, len(problems))])
	}
	if owners := liveOwners(bs[0].clusterView(t)); owners[bs[2].id()] != 0 {
		t.Fatalf("the stopped broker still holds shards: %v", owners)
	}
}

// TestClusterLostShardsReleaseTheirPartitions: when a broker joins and takes
// shards over, the partition actors the first broker ran for those shards
// are passivated at once (shards.MembershipConfig.OnLost), not after
// QUEEN_PARTITION_IDLE (off here); the ones of the shards it keeps stay.
func TestClusterLostShardsReleaseTheirPartitions(t *testing.T) {
	t.Parallel()
	const lease = 2 * time.Second
	a := startEnv(t, func(c *Config) { c.ShardLease = lease })
	var parts []string
	for i := range 48 {
		parts = append(parts, fmt.Sprintf("p%d", i))
	}
	for _, p := range parts {
		wantStatuses(t, a.pushOK(t, "http", items(it("released", p, "t1")), 1), "queued")
	}
	if n := a.b.host.PartitionStats().Active; n != int64(len(parts)) {
		t.Fatalf("a runs %d partition actors, want %d", n, len(parts))
	}
	b := joinCluster(t, a, lease)
	envs := []*env{a, b}
	eventually(t, 30*time.Second, 20*time.Millisecond, "two brokers share the shards", func() (bool, string) { return settled(t, envs, 1) })
	eventually(t, 20*time.Second, 10*time.Millisecond, "a runs only the partitions of the shards it holds", func() (bool, string) {
		held := map[int]bool{}
		for _, n := range a.b.members.Held() {
			held[n] = true
		}
		kept := 0
		for _, p := range parts {
			if held[queen.ShardOf("released", p, shards.DefaultCount)] {
				kept++
			}
		}
		ps := a.b.host.PartitionStats()
		return ps.Active == int64(kept) && kept < len(parts), fmt.Sprintf("active %d, partitions on held shards %d: %+v", ps.Active, kept, ps)
	})
	// The partitions moved answer from b, exactly.
	for _, p := range parts {
		wantStatuses(t, b.pushOK(t, "nats", items(it("released", p, "t1")), 1), "duplicate")
	}
}
