package broker

// The model-based equivalence test of the dedup cache (SPEC.md §3, §8): one
// seeded random sequence of pushes (new ids, repeats, in-request repeats,
// several partitions), window changes (to 0 and back), clock advances and
// retention steps runs against the broker with the cache on, off, on with a
// budget so small that it evicts constantly, and split across two brokers
// sharing one database, with sidecar ranges of a second compacted to level 1
// at every retention step, and with every partition actor passivated after
// every few pushes (each next push reactivates it, or races its stop); the verdicts and message-id relations of every run
// must equal each other and a plain reference model of SPEC.md §3.
//
// Time: an advance of d seconds moves every stored created_at back by d
// (what the passing of d seconds looks like to the window check, which runs
// on PostgreSQL's clock). Virtual ages are multiples of 50 s and windows of
// 100 s, so the milliseconds the test itself takes never sit on a boundary.
// Retention: a step of the real retention loop (persistence.RetentionStep)
// with the queue's retentionSeconds = retainSeconds and the test-only
// sidecar floor lowered to floorSeconds: segments older than retainSeconds
// go (the original's id becomes the zero UUID), sidecar entries older than
// GREATEST(window, floorSeconds) are purged (the id is forgotten; the
// queue is alone in its database, whose largest floor is then its own); the step
// runs with NoRangeGrace, so a segment in a time range goes at the cutoff
// too, not when its range is dropped. The
// brokers' own loops are slowed to once an hour so only these steps act.

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/queen-mq/queen-go/actors"
	"github.com/queen-mq/queen-go/persistence"
)

const (
	retainSeconds = 600
	floorSeconds  = 250
)

// eqOp is one step of a sequence.
type eqOp struct {
	kind   string // push, window, advance, retain
	items  []item // push
	window int    // window
	secs   int    // advance
}

// eqSequence makes the seeded sequence.
func eqSequence(queue string, seed int64, n int) []eqOp {
	r := rand.New(rand.NewSource(seed))
	var ops []eqOp
	for len(ops) < n {
		switch x := r.Intn(100); {
		case x < 70:
			k := 1 + r.Intn(5)
			var its []item
			for i := 0; i < k; i++ {
				part := fmt.Sprintf("p%d", r.Intn(3))
				txn := fmt.Sprintf("t%d", r.Intn(25))
				if i > 0 && r.Intn(4) == 0 { // an in-request repeat
					prev := its[r.Intn(len(its))]
					part, txn = prev["partition"].(string), prev["transactionId"].(string)
				}
				its = append(its, it(queue, part, txn))
			}
			ops = append(ops, eqOp{kind: "push", items: its})
		case x < 78:
			ops = append(ops, eqOp{kind: "window", window: []int{0, 100, 200, 300, 3600}[r.Intn(5)]})
		case x < 93:
			ops = append(ops, eqOp{kind: "advance", secs: 50 * (1 + r.Intn(3))})
		default:
			ops = append(ops, eqOp{kind: "retain"})
		}
	}
	return ops
}

// eqModel is the reference model of SPEC.md §3.
type eqModel struct {
	window int
	now    int // virtual seconds
	msgs   map[string][]*eqMsg
	next   int
}

type eqMsg struct {
	txn     string
	at      int
	id      string // canonical: "m<k>"
	segment bool   // the segment still exists
	sidecar bool   // the sidecar row still exists
}

func newEqModel() *eqModel { return &eqModel{window: 3600, msgs: map[string][]*eqMsg{}} }

// push returns the canonical verdict of every item: "queued m<k>",
// "duplicate m<k>" or "duplicate zero".
func (m *eqModel) push(its []item) []string {
	out := make([]string, len(its))
	leader := map[string]int{}
	for i, it := range its {
		part, txn := it["partition"].(string), it["transactionId"].(string)
		key := part + "\x00" + txn
		if m.window > 0 {
			if l, ok := leader[key]; ok {
				out[i] = "duplicate " + strings.Fields(out[l])[1]
				continue
			}
			leader[key] = i
			var orig *eqMsg
			for _, msg := range m.msgs[part] {
				if msg.txn == txn && msg.sidecar && m.now-msg.at < m.window {
					orig = msg
					break // the lowest offset
				}
			}
			if orig != nil {
				if orig.segment {
					out[i] = "duplicate " + orig.id
				} else {
					out[i] = "duplicate zero"
				}
				continue
			}
		}
		m.next++
		msg := &eqMsg{txn: txn, at: m.now, id: "m" + strconv.Itoa(m.next), segment: true, sidecar: true}
		m.msgs[part] = append(m.msgs[part], msg)
		out[i] = "queued " + msg.id
	}
	return out
}

func (m *eqModel) retain() {
	purge := max(m.window, floorSeconds)
	for _, msgs := range m.msgs {
		for _, msg := range msgs {
			age := m.now - msg.at
			// The test's real milliseconds make an age of exactly N
			// seconds slightly more than N on PostgreSQL's clock.
			if age >= retainSeconds {
				msg.segment = false
			}
			if age >= purge {
				msg.sidecar = false
			}
		}
	}
}

// eqRun runs ops against pushers (round robin per push) and returns the
// canonical verdicts. passivateEvery > 0 asks every broker to passivate all
// its idle partition actors after every passivateEvery pushes, without
// waiting for them to stop.
func eqRun(t *testing.T, queue string, envs []*env, ops []eqOp, passivateEvery int) []string {
	t.Helper()
	ctx := context.Background()
	db := envs[0].db
	span := envs[0].b.cfg.SidecarRange
	store, err := persistence.Open(ctx, persistence.Config{URL: envs[0].url, MaxConns: 2, SidecarRange: span})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	canon := map[string]string{zeroUUID: "zero"}
	next := 0
	window := 3600
	eqConfigure(t, envs[0], queue, window)
	var out []string
	pushes := 0
	for i, op := range ops {
		switch op.kind {
		case "push":
			e := envs[pushes%len(envs)]
			pushes++
			replies := e.pushOK(t, "http", items(op.items...), len(op.items))
			for j, r := range replies {
				switch r.Status {
				case "queued":
					next++
					canon[r.MessageID] = "m" + strconv.Itoa(next)
				case "duplicate":
				default:
					t.Fatalf("op %d item %d: %+v", i, j, r)
				}
				id, ok := canon[r.MessageID]
				if !ok {
					id = "unknown " + r.MessageID
				}
				out = append(out, r.Status+" "+id)
			}
			if passivateEvery > 0 && pushes%passivateEvery == 0 {
				for _, e := range envs {
					e.b.host.Passivate(0)
				}
			}
		case "window":
			window = op.window
			eqConfigure(t, envs[0], queue, window)
		case "advance":
			// The brokers' caches read the same clock (queen.Span):
			// they are held while the stored created_at moves back.
			caches := make([]*actors.Cache, len(envs))
			for k, e := range envs {
				caches[k] = e.b.cache
			}
			pids := queuePartitions(t, db, queue)
			d := time.Duration(op.secs) * time.Second
			err := actors.Age(caches, pids, d, func() error { return store.AgePartitions(ctx, pids, d) })
			if err != nil {
				t.Fatal(err)
			}
		case "retain":
			rc := persistence.RetentionConfig{TxnsFloor: floorSeconds * time.Second, NoRangeGrace: true}
			if span == time.Second {
				rc.CompactGrace = time.Millisecond // every closed range to level 1
			}
			if _, err := store.RetentionStep(ctx, rc); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The sidecar's entries expire past the largest floor over all queues
	// (migration 0017): the next seed's queue must be alone in the database
	// for the model's floor to be the database's.
	if _, _, err := store.DeleteQueue(ctx, queue); err != nil {
		t.Fatal(err)
	}
	return out
}

// eqConfigure sets the queue's window, keeping retentionSeconds (a
// configure is a full replace).
func eqConfigure(t *testing.T, e *env, queue string, window int) {
	t.Helper()
	e.configureOK(t, "http", []byte(fmt.Sprintf(`{"queue":%q,"options":{"dedupWindowSeconds":%d,"retentionSeconds":%d}}`, queue, window, retainSeconds)))
}

func eqExpected(ops []eqOp) []string {
	m := newEqModel()
	var out []string
	for _, op := range ops {
		switch op.kind {
		case "push":
			out = append(out, m.push(op.items)...)
		case "window":
			m.window = op.window
		case "advance":
			m.now += op.secs
		case "retain":
			m.retain()
		}
	}
	return out
}

func TestDedupCacheEquivalence(t *testing.T) {
	seeds := 20
	if v := os.Getenv("QUEEN_EQUIV_SEEDS"); v != "" {
		seeds, _ = strconv.Atoi(v)
	}
	base := int64(20261130)
	if v := os.Getenv("QUEEN_EQUIV_SEED"); v != "" {
		base, _ = strconv.ParseInt(v, 10, 64)
	}
	// The brokers are started once and shared by the seeds, which run one
	// after another, each on a queue of its own (a retention step acts on
	// every queue, so two seeds must not interleave).
	slow := func(c *Config) { c.Retention.Interval = time.Hour }
	off := startEnv(t, func(c *Config) { slow(c); c.DedupCacheOff = true })
	on := startEnv(t, slow)
	evicting := startEnv(t, func(c *Config) { slow(c); c.DedupCacheBytes = 800; c.DedupCacheColdFor = time.Nanosecond })
	a := startEnv(t, slow)
	b := startEnvOn(t, a.url, func(c *Config) { slow(c); c.NATSURL = a.b.NATSURL() })
	// Passivation forced every 3 pushes (the idle sweep itself is an hour
	// away); a reactivated cache is cold for a nanosecond only, so it warms
	// (reads its window back) between passivations.
	passivating := startEnv(t, func(c *Config) { slow(c); c.PartitionIdle = time.Hour; c.DedupCacheColdFor = time.Nanosecond })
	// One partition actor at most: every push to another partition
	// passivates the one pushed before (the least recently pushed).
	pressured := startEnv(t, func(c *Config) {
		slow(c)
		c.PartitionIdle, c.MaxActivePartitions, c.DedupCacheColdFor = time.Hour, 1, time.Nanosecond
	})
	// Sidecar ranges of one second, compacted at every retention step: the
	// lookups of older pushes go to level 1 (hash_blocks).
	compacting := startEnv(t, func(c *Config) { slow(c); c.SidecarRange = time.Second })
	runs := []struct {
		name      string
		envs      []*env
		passivate int
	}{
		{"cache-off", []*env{off}, 0},
		{"cache-on", []*env{on}, 0},
		{"cache-evicting", []*env{evicting}, 0},
		{"two-brokers", []*env{a, b}, 0},
		{"passivating", []*env{passivating}, 3},
		{"pressured", []*env{pressured}, 0},
		{"compacting", []*env{compacting}, 0},
	}
	for s := 0; s < seeds; s++ {
		seed := base + int64(s)
		queue := fmt.Sprintf("eq-%d", seed)
		ops := eqSequence(queue, seed, 120)
		want := eqExpected(ops)
		// The runs use databases of their own: they go side by side.
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			for _, run := range runs {
				t.Run(run.name, func(t *testing.T) {
					t.Parallel()
					got := eqRun(t, queue, run.envs, ops, run.passivate)
					if d := firstDiff(got, want); d >= 0 {
						t.Errorf("seed %d, run %s: item %d is %q, the model says %q (rerun with QUEEN_EQUIV_SEED=%d QUEEN_EQUIV_SEEDS=1)",
							seed, run.name, d, at(got, d), at(want, d), seed)
					}
				})
			}
		})
		if t.Failed() {
			return
		}
	}
	// The runs must have exercised what they are named for; one seed alone
	// (a rerun of a divergence) may legitimately not: its two brokers may
	// never leave each other's caches vouching, say.
	for _, run := range runs {
		if seeds < 5 {
			break
		}
		st := run.envs[0].b.cache.Stats()
		switch run.name {
		case "cache-on", "two-brokers":
			if st.NarrowedProbes == 0 {
				t.Errorf("run %s never used the cache: %+v", run.name, st)
			}
		case "cache-evicting":
			if st.Evictions == 0 {
				t.Errorf("run %s never evicted: %+v", run.name, st)
			}
		case "passivating":
			if ps := run.envs[0].b.host.PartitionStats(); ps.Passivated == 0 {
				t.Errorf("run %s never passivated: %+v", run.name, ps)
			}
			if st.NarrowedProbes == 0 {
				t.Errorf("run %s never used the cache: %+v", run.name, st)
			}
			t.Logf("run %s: %+v, cache %+v", run.name, run.envs[0].b.host.PartitionStats(), st)
		case "pressured":
			if ps := run.envs[0].b.host.PartitionStats(); ps.PressurePassivated == 0 {
				t.Errorf("run %s never passivated for the bound: %+v", run.name, ps)
			}
			t.Logf("run %s: %+v, cache %+v", run.name, run.envs[0].b.host.PartitionStats(), st)
		case "compacting":
			var n int
			if err := run.envs[0].db.QueryRow(context.Background(), `SELECT count(*) FROM queen.sidecar_ranges WHERE bits IS NOT NULL`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				t.Errorf("run %s never compacted a sidecar range", run.name)
			}
			t.Logf("run %s: %d sidecar ranges compacted", run.name, n)
		case "cache-off":
			if st.NarrowedProbes != 0 || st.Bytes != 0 {
				t.Errorf("run %s used the cache: %+v", run.name, st)
			}
		}
	}
	t.Logf("%d seeds, 0 divergences", seeds)
}

func firstDiff(a, b []string) int {
	for i := 0; i < max(len(a), len(b)); i++ {
		if at(a, i) != at(b, i) {
			return i
		}
	}
	return -1
}

func at(s []string, i int) string {
	if i < len(s) {
		return s[i]
	}
	return "<none>"
}
