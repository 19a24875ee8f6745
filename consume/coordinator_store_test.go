package consume

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/internal/storetest"
)

// The coordinator's own decisions, against storetest.MemStore (which the
// shared store suite holds to PostgreSQL's answers): which partitions a
// wildcard pop tries, in what order, when it asks the store for
// candidates, how long polls park and wake, and who is told of retries.

// countingStore counts the coordinator's store calls.
type countingStore struct {
	*storetest.MemStore
	mu         sync.Mutex
	pops       []uuid.UUID // partitions popped alone (most = 1)
	candidates int
	popMany    [][]uuid.UUID // the partitions of each pop of several
	wide       int           // pops of one partition that named several
}

func (s *countingStore) PopPartitions(ctx context.Context, spec queen.PopSpec, pids []uuid.UUID, most int) (queen.PopResult, []queen.PopState, error) {
	s.mu.Lock()
	if most == 1 {
		if len(pids) != 1 {
			s.wide++
		}
		s.pops = append(s.pops, pids...)
	} else {
		s.popMany = append(s.popMany, append([]uuid.UUID(nil), pids...))
	}
	s.mu.Unlock()
	return s.MemStore.PopPartitions(ctx, spec, pids, most)
}

func (s *countingStore) Candidates(ctx context.Context, queue, group string, limit int) ([]uuid.UUID, error) {
	s.mu.Lock()
	s.candidates++
	s.mu.Unlock()
	return s.MemStore.Candidates(ctx, queue, group, limit)
}

func (s *countingStore) reset() {
	s.mu.Lock()
	s.pops, s.candidates, s.popMany = nil, 0, nil
	s.mu.Unlock()
}

func newCounting() *countingStore { return &countingStore{MemStore: storetest.NewMem()} }

func pop(t *testing.T, c *Coordinator, req queen.PopRequest) queen.PopResult {
	t.Helper()
	if req.Batch == 0 {
		req.Batch = 1
	}
	if req.ConsumerGroup == "" {
		req.ConsumerGroup = "g"
	}
	res, err := c.Pop(context.Background(), req)
	require.NoError(t, err)
	return res
}

func msgOffsets(ms []queen.Message) []int64 {
	out := make([]int64, len(ms))
	for i, m := range ms {
		out[i] = m.Offset
	}
	return out
}

// waitParked polls (deadline 20 s) until n long polls are parked.
func waitParked(t *testing.T, c *Coordinator, n int64) {
	t.Helper()
	require.Eventually(t, func() bool { return c.Parked() == n }, 20*time.Second, time.Millisecond)
}

func TestPopNamedPartition(t *testing.T) {
	st := storetest.NewMem()
	st.Push("q", "p1", "a")
	st.Push("q", "p2", "b", "c")
	c := New(st, Options{})
	res := pop(t, c, queen.PopRequest{Queue: "q", Partition: "p2", Batch: 5})
	require.Equal(t, []int64{0, 1}, msgOffsets(res.Messages))
	require.Equal(t, "p2", res.Partition)
	res = pop(t, c, queen.PopRequest{Queue: "q", Partition: "never", Batch: 5})
	require.Empty(t, res.Messages, "a pop never creates a partition")
	res = pop(t, c, queen.PopRequest{Queue: "nope", Partition: "p1"})
	require.Empty(t, res.Messages)
}

// A message committed before a pop started is visible to it, whatever the
// hint knows: pushes that never reached Notify are found through the
// store's candidates.
func TestPopWildcardWithoutHintAsksCandidates(t *testing.T) {
	st := newCounting()
	st.Push("q", "p1", "a")
	c := New(st, Options{})
	res := pop(t, c, queen.PopRequest{Queue: "q"})
	require.Len(t, res.Messages, 1)
	require.Equal(t, 1, st.candidates)
}

// Drained partitions leave the group's hint: the next empty pop asks the
// store for candidates once and pops none of them.
func TestPopDrainedPartitionsLeaveTheHint(t *testing.T) {
	st := newCounting()
	var pids []uuid.UUID
	for _, p := range []string{"p1", "p2", "p3"} {
		pid, _ := st.Push("q", p, "a")
		pids = append(pids, pid)
	}
	c := New(st, Options{})
	c.Notify("q", pids)
	for range 3 {
		require.Len(t, pop(t, c, queen.PopRequest{Queue: "q", AutoAck: true}).Messages, 1)
	}
	require.Empty(t, pop(t, c, queen.PopRequest{Queue: "q", AutoAck: true}).Messages) // drains the hint
	st.reset()
	require.Empty(t, pop(t, c, queen.PopRequest{Queue: "q", AutoAck: true}).Messages)
	require.Equal(t, 1, st.candidates)
	require.Empty(t, st.pops, "nothing hinted, no candidate")
	require.Zero(t, st.wide, "a pop of one partition holds one consumer row at a time")
}

// A wildcard pop rotates where it starts in the group's hint, so
// consecutive pops spread over the partitions instead of draining the
// first one, and leased partitions are skipped for free ones.
func TestPopFairnessAcrossPartitions(t *testing.T) {
	st := storetest.NewMem()
	parts := []string{"p1", "p2", "p3", "p4"}
	for _, p := range parts {
		st.Push("q", p, "a", "b", "c")
	}
	c := New(st, Options{})
	served := map[string][]int64{}
	var order []string
	for range 12 {
		res := pop(t, c, queen.PopRequest{Queue: "q", AutoAck: true})
		require.Len(t, res.Messages, 1)
		m := res.Messages[0]
		served[m.Partition] = append(served[m.Partition], m.Offset)
		order = append(order, m.Partition)
	}
	require.ElementsMatch(t, parts, distinct(order[:5]), "every partition served within the first five pops: %v", order)
	for _, p := range parts {
		require.Equal(t, []int64{0, 1, 2}, served[p], "offset order within %s", p)
	}
	require.Empty(t, pop(t, c, queen.PopRequest{Queue: "q", AutoAck: true}).Messages)

	// Leased pops of one group: each lands on a partition nobody holds.
	st2 := storetest.NewMem()
	for _, p := range parts {
		st2.Push("q", p, "a", "b")
	}
	c2 := New(st2, Options{})
	var got []string
	for range 4 {
		res := pop(t, c2, queen.PopRequest{Queue: "q", Batch: 10})
		require.Len(t, res.Messages, 2)
		got = append(got, res.Partition)
	}
	require.ElementsMatch(t, parts, got)
	require.Empty(t, pop(t, c2, queen.PopRequest{Queue: "q", Batch: 10}).Messages, "every partition is leased")
}

func distinct(xs []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, x := range xs {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

func TestPopLeaseThenAck(t *testing.T) {
	st := storetest.NewMem()
	pid, _ := st.Push("q", "p", "a", "b", "c")
	c := New(st, Options{})
	res := pop(t, c, queen.PopRequest{Queue: "q", Batch: 2})
	require.Equal(t, []int64{0, 1}, msgOffsets(res.Messages))
	require.NotNil(t, res.LeaseID)
	require.Empty(t, pop(t, c, queen.PopRequest{Queue: "q", Batch: 2}).Messages, "the lease holds the partition")
	lease := uuid.MustParse(*res.LeaseID)
	acks, err := c.Ack(context.Background(), []queen.AckItem{{PartitionID: pid, Offset: 1, Status: queen.AckCompleted, ConsumerGroup: "g", LeaseID: &lease}})
	require.NoError(t, err)
	require.Equal(t, queen.Acked, acks[0].Result)
	res = pop(t, c, queen.PopRequest{Queue: "q", Batch: 2})
	require.Equal(t, []int64{2}, msgOffsets(res.Messages))
}

// Subscription modes (SPEC.md §4): "all" (and any other mode, upstream's
// from_beginning included: the wire decoder maps them to
// SubscriptionNew=false) reads from the oldest message; "new"/"new-only"
// from the group's first pop of the queue, recorded before any partition
// exists, on named and wildcard pops alike.
func TestPopSubscriptionModes(t *testing.T) {
	for _, tc := range []struct {
		name    string
		isNew   bool
		named   bool
		offsets []int64
	}{
		{"all/wildcard", false, false, []int64{0, 1, 2}},
		{"all/named", false, true, []int64{0, 1, 2}},
		{"new/wildcard", true, false, []int64{2}},
		{"new/named", true, true, []int64{2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := storetest.NewMem()
			pid, _ := st.Push("q", "p", "a", "b")
			c := New(st, Options{})
			req := queen.PopRequest{Queue: "q", Batch: 10, SubscriptionNew: tc.isNew, AutoAck: true}
			if tc.named {
				req.Partition = "p"
			}
			first := pop(t, c, req)
			st.Push("q", "p", "c")
			c.Notify("q", []uuid.UUID{pid})
			second := pop(t, c, req)
			require.Equal(t, tc.offsets, append(msgOffsets(first.Messages), msgOffsets(second.Messages)...))
		})
	}
	t.Run("new/before-any-partition", func(t *testing.T) {
		st := storetest.NewMem()
		_, err := st.Configure(context.Background(), queen.ConfigureRequest{Queue: "q"})
		require.NoError(t, err)
		c := New(st, Options{})
		require.Empty(t, pop(t, c, queen.PopRequest{Queue: "q", SubscriptionNew: true}).Messages)
		st.Push("q", "p", "a")
		res := pop(t, c, queen.PopRequest{Queue: "q", SubscriptionNew: true})
		require.Len(t, res.Messages, 1, "pushed after the group's first pop")
	})
	t.Run("first-pop-fixes-it", func(t *testing.T) {
		st := storetest.NewMem()
		st.Push("q", "p1", "a")
		c := New(st, Options{})
		require.Len(t, pop(t, c, queen.PopRequest{Queue: "q", AutoAck: true}).Messages, 1)
		st.Push("q", "p2", "b") // a partition the group has not met
		res := pop(t, c, queen.PopRequest{Queue: "q", AutoAck: true, SubscriptionNew: true})
		require.Len(t, res.Messages, 1, "a later mode does not move the subscription")
	})
}

// An expired span is bisected (rules.Bisection, decided by the store under
// the row lock): the coordinator passes the smaller deliveries through
// its wildcard path unchanged.
func TestPopBisectsExpiredSpan(t *testing.T) {
	st := storetest.NewMem()
	st.Push("q", "p", "a", "b", "c", "d", "e", "f")
	c := New(st, Options{})
	require.Len(t, pop(t, c, queen.PopRequest{Queue: "q", Batch: 6}).Messages, 6)
	require.NoError(t, st.ExpireLeases(context.Background()))
	res := pop(t, c, queen.PopRequest{Queue: "q", Batch: 6})
	require.Equal(t, []int64{0, 1, 2}, msgOffsets(res.Messages))
	require.Equal(t, int64(1), st.LeaseStats().Bisections)
	require.NoError(t, st.ExpireLeases(context.Background()))
	res = pop(t, c, queen.PopRequest{Queue: "q", Batch: 6})
	require.Equal(t, []int64{0}, msgOffsets(res.Messages))
	require.NoError(t, st.ExpireLeases(context.Background()))
	res = pop(t, c, queen.PopRequest{Queue: "q", Batch: 6})
	require.Equal(t, []int64{0}, msgOffsets(res.Messages))
	require.Equal(t, 1, res.Messages[0].RetryCount, "a single-message span is charged")
}

// A multi-partition pop (Partitions > 1) claims up to Partitions
// partitions in one store call, under one lease, and counts them.
func TestPopMultiPartition(t *testing.T) {
	st := newCounting()
	var pids []uuid.UUID
	for _, p := range []string{"p1", "p2", "p3", "p4"} {
		pid, _ := st.Push("q", p, "a", "b")
		pids = append(pids, pid)
	}
	c := New(st, Options{})
	c.Notify("q", pids)
	res := pop(t, c, queen.PopRequest{Queue: "q", Batch: 100, Partitions: 3})
	require.Equal(t, 3, res.PartitionsClaimed)
	require.Len(t, res.Messages, 6)
	parts := map[string]bool{}
	for _, m := range res.Messages {
		require.Equal(t, *res.LeaseID, *m.LeaseID, "one lease for every claimed partition")
		parts[m.Partition] = true
	}
	require.Len(t, parts, 3)
	res = pop(t, c, queen.PopRequest{Queue: "q", Batch: 100, Partitions: 3})
	require.Equal(t, 1, res.PartitionsClaimed, "the fourth, the others are leased")
	require.Len(t, res.Messages, 2)
	require.False(t, parts[res.Messages[0].Partition])
	require.Empty(t, pop(t, c, queen.PopRequest{Queue: "q", Batch: 100, Partitions: 3}).Messages)
	for _, call := range st.popMany {
		require.LessOrEqual(t, len(call), max(3, 2*maxTries))
	}
	require.Empty(t, st.pops, "a multi-partition pop never pops partition by partition")

	// Batch bounds every partition's messages together.
	st2 := storetest.NewMem()
	for _, p := range []string{"p1", "p2"} {
		st2.Push("q", p, "a", "b")
	}
	res = pop(t, New(st2, Options{}), queen.PopRequest{Queue: "q", Batch: 3, Partitions: 2})
	require.Len(t, res.Messages, 3)
	require.Equal(t, 2, res.PartitionsClaimed)
}

// A pop of several partitions whose batch fills before it reaches the
// last of them (queen.PopUnreached) leaves those to the next pop, which
// tries them before the rotation's, after the partition it cut short
// (queen.PopCut; with autoAck nothing holds it): they wait one pop, not a
// sweep of the whole hint (at 10,000 partitions a sweep is seconds). A
// partition the batch ended exactly at the end of does not lead.
func TestPopTriesUnreachedPartitionsFirst(t *testing.T) {
	st := newCounting()
	var pids []uuid.UUID
	for i := range 40 {
		pid, _ := st.Push("q", fmt.Sprintf("p%02d", i), "a", "b", "c")
		pids = append(pids, pid)
	}
	c := New(st, Options{})
	c.update("q", "g", func(*groupHint) {}) // the group pops: it has a hint
	c.Notify("q", pids)
	req := queen.PopRequest{Queue: "q", Batch: 12, Partitions: 8, AutoAck: true}
	served := map[uuid.UUID][]int64{}
	var prev []uuid.UUID // the previous pop's unreached partitions
	for round := 0; len(served) < len(pids) || len(prev) > 0; round++ {
		require.Less(t, round, 20, "120 messages in pops of 12")
		st.reset()
		res := pop(t, c, req)
		require.NotEmpty(t, st.popMany)
		call := st.popMany[0]
		if len(prev) > 0 {
			require.Equal(t, prev, call[:len(prev)], "round %d tries the partitions the last pop did not reach first", round)
		}
		before := map[uuid.UUID]int{}
		for _, pid := range call {
			before[pid] = len(served[pid])
		}
		got := map[uuid.UUID]bool{}
		for _, m := range res.Messages {
			pid := uuid.MustParse(m.PartitionID)
			served[pid] = append(served[pid], m.Offset)
			got[pid] = true
		}
		var first, last uuid.UUID // the partitions delivered first and last: the batch may have cut last short
		var unreached []uuid.UUID
		for _, pid := range call {
			if got[pid] {
				if first == uuid.Nil {
					first = pid
				}
				last = pid
			} else if before[pid] < 3 {
				unreached = append(unreached, pid)
			}
		}
		// The last partition delivered leads only when the batch cut it
		// short (queen.PopCut): a batch that ended at its end left nothing.
		prev = unreached
		if last != first && len(served[last]) < 3 {
			prev = append([]uuid.UUID{last}, unreached...)
		}
		if round == 0 {
			require.Len(t, res.Messages, 12)
			require.Len(t, unreached, 4, "four partitions fill the batch, four are not reached")
		}
	}
	for _, pid := range pids {
		require.Equal(t, []int64{0, 1, 2}, served[pid], "every message of %s once, in order", pid)
	}
}

// A full pop may leave messages in the partition it leased last; the ack
// that ends that lease puts the partition at the front of the group's next
// pick, behind the partitions the pop did not reach.
func TestPopAckedPartialPartitionComesNext(t *testing.T) {
	st := newCounting()
	var pids []uuid.UUID
	for i := range 40 {
		pid, _ := st.Push("q", fmt.Sprintf("p%02d", i), "a", "b", "c", "d", "e")
		pids = append(pids, pid)
	}
	c := New(st, Options{})
	c.update("q", "g", func(*groupHint) {})
	c.Notify("q", pids)
	req := queen.PopRequest{Queue: "q", Batch: 12, Partitions: 8}
	res := pop(t, c, req)
	require.Len(t, res.Messages, 12)
	call := st.popMany[0]
	require.Equal(t, 3, res.PartitionsClaimed, "5 + 5 + 2 of the third")
	partial := call[2]
	require.Equal(t, partial.String(), res.Messages[11].PartitionID)
	ackAll(t, c, res)
	st.reset()
	pop(t, c, req)
	next := st.popMany[0]
	require.Equal(t, append(append([]uuid.UUID(nil), call[3:]...), partial), next[:6],
		"the unreached partitions, then the one the batch cut short")
}

// ackAll acks every message of res (group "g") through the coordinator.
func ackAll(t *testing.T, c *Coordinator, res queen.PopResult) {
	t.Helper()
	lease := uuid.MustParse(*res.LeaseID)
	var acks []queen.AckItem
	for _, m := range res.Messages {
		acks = append(acks, queen.AckItem{PartitionID: uuid.MustParse(m.PartitionID), Offset: m.Offset,
			Status: queen.AckCompleted, ConsumerGroup: "g", LeaseID: &lease, TransactionID: m.TransactionID})
	}
	_, err := c.Ack(context.Background(), acks)
	require.NoError(t, err)
}

// A deep partition that fills a pop's batch alone is not put first again:
// pops of several partitions keep rotating over every partition with
// messages, also when each holds more than a batch.
func TestPopDeepPartitionsKeepRotating(t *testing.T) {
	for _, autoAck := range []bool{true, false} {
		st := newCounting()
		var pids []uuid.UUID
		for i := range 8 {
			msgs := make([]string, 50)
			for j := range msgs {
				msgs[j] = fmt.Sprintf("m%d", j)
			}
			pid, _ := st.Push("q", fmt.Sprintf("p%d", i), msgs...)
			pids = append(pids, pid)
		}
		c := New(st, Options{})
		c.update("q", "g", func(*groupHint) {})
		c.Notify("q", pids)
		served := map[string]bool{}
		for range 8 {
			res := pop(t, c, queen.PopRequest{Queue: "q", Batch: 10, Partitions: 4, AutoAck: autoAck})
			require.Len(t, res.Messages, 10)
			served[res.Partition] = true
			if !autoAck {
				ackAll(t, c, res)
			}
		}
		require.Len(t, served, 8, "eight pops of one deep partition each serve all eight (autoAck %v)", autoAck)
	}
}

// racyStore answers a pop of partition racy empty while a push to it is
// notified, as when the push commits after the pop read the partition.
type racyStore struct {
	*countingStore
	c     *Coordinator
	racy  uuid.UUID
	fired bool
}

func (s *racyStore) PopPartitions(ctx context.Context, spec queen.PopSpec, pids []uuid.UUID, most int) (queen.PopResult, []queen.PopState, error) {
	res, states, err := s.countingStore.PopPartitions(ctx, spec, pids, most)
	for i, pid := range pids {
		if pid == s.racy && !s.fired && states[i] == queen.PopEmpty {
			s.fired = true
			s.Push("q", "racy", "late")
			s.c.Notify("q", []uuid.UUID{pid})
		}
	}
	return res, states, err
}

// A pop that finds a partition empty drops it from the hint only if no
// push to it was notified while the pop ran: a message committed after the
// pop read the partition stays hinted, and the next pops find it without
// a candidate scan.
func TestPopKeepsPartitionNotifiedDuringIt(t *testing.T) {
	cs := newCounting()
	racy, _ := cs.Push("q", "racy", "a")
	other, _ := cs.Push("q", "other", "a", "b", "c")
	st := &racyStore{countingStore: cs, racy: racy}
	c := New(st, Options{})
	st.c = c
	c.update("q", "g", func(*groupHint) {})
	c.Notify("q", []uuid.UUID{racy, other})
	req := queen.PopRequest{Queue: "q", AutoAck: true}
	require.Equal(t, "racy", pop(t, c, req).Partition)
	require.Equal(t, "other", pop(t, c, req).Partition)
	require.Equal(t, "other", pop(t, c, req).Partition, "racy was empty, and a push to it was notified meanwhile")
	require.True(t, st.fired)
	c.update("q", "g", func(g *groupHint) { require.True(t, g.hinted(racy), "still hinted") })
	cs.reset()
	got := map[string]int{}
	for range 2 {
		got[pop(t, c, req).Partition]++
	}
	require.Equal(t, map[string]int{"racy": 1, "other": 1}, got)
	require.Zero(t, cs.candidates, "found through the hint")
}

// A long poll parks until a push to its queue is notified, and answers
// with the message (Recheck is longer than the test: only the wake-up can
// end the wait).
func TestLongPollWakesOnNotify(t *testing.T) {
	st := storetest.NewMem()
	_, err := st.Configure(context.Background(), queen.ConfigureRequest{Queue: "q"})
	require.NoError(t, err)
	c := New(st, Options{Recheck: time.Hour})
	done := make(chan queen.PopResult, 1)
	go func() {
		res, err := c.Pop(context.Background(), queen.PopRequest{Queue: "q", Batch: 1, ConsumerGroup: "g", Wait: true, Timeout: time.Hour})
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	waitParked(t, c, 1)
	pid, _ := st.Push("q", "p", "a")
	c.Notify("other", []uuid.UUID{uuid.New()}) // another queue's push wakes nobody here
	select {
	case <-done:
		t.Fatal("woken by another queue's push")
	default:
	}
	c.Notify("q", []uuid.UUID{pid})
	res := <-done
	require.Len(t, res.Messages, 1)
	require.Equal(t, int64(0), c.Parked())
}

// A parked long poll ends, empty and without error, when its context ends.
func TestLongPollEndsWithContext(t *testing.T) {
	st := storetest.NewMem()
	c := New(st, Options{Recheck: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		res, err := c.Pop(ctx, queen.PopRequest{Queue: "q", Batch: 1, ConsumerGroup: "g", Wait: true, Timeout: time.Hour})
		if len(res.Messages) > 0 {
			err = context.Canceled
		}
		done <- err
	}()
	waitParked(t, c, 1)
	cancel()
	require.NoError(t, <-done)
	require.Equal(t, int64(0), c.Parked())
}

// A label pop (no queue, a namespace) waits on every push and serves any
// queue carrying the label.
func TestLongPollByLabelWakesOnAnyQueue(t *testing.T) {
	st := storetest.NewMem()
	for _, q := range []string{"a", "b"} {
		_, err := st.Configure(context.Background(), queen.ConfigureRequest{Queue: q, Namespace: "n", NamespaceSet: true})
		require.NoError(t, err)
	}
	c := New(st, Options{Recheck: time.Hour})
	done := make(chan queen.PopResult, 1)
	go func() {
		res, _ := c.Pop(context.Background(), queen.PopRequest{Namespace: "n", Batch: 1, ConsumerGroup: "g", Wait: true, Timeout: time.Hour})
		done <- res
	}()
	waitParked(t, c, 1)
	pid, _ := st.Push("b", "p", "x")
	c.Notify("b", []uuid.UUID{pid})
	res := <-done
	require.Len(t, res.Messages, 1)
	require.Equal(t, "b", res.Queue)
}

func TestPopByLabelRotatesQueues(t *testing.T) {
	st := storetest.NewMem()
	for _, q := range []string{"a", "b", "c"} {
		_, err := st.Configure(context.Background(), queen.ConfigureRequest{Queue: q, Task: "t", TaskSet: true})
		require.NoError(t, err)
		st.Push(q, "p", "1", "2")
	}
	st.Push("unlabelled", "p", "1")
	c := New(st, Options{})
	var queues []string
	for range 6 {
		res := pop(t, c, queen.PopRequest{Task: "t", AutoAck: true})
		require.Len(t, res.Messages, 1)
		queues = append(queues, res.Queue)
	}
	require.Equal(t, []string{"a", "b", "c", "a", "b", "c"}, queues)
	require.Empty(t, pop(t, c, queen.PopRequest{Task: "t", AutoAck: true}).Messages)
}

// A failed (retry-scheduled) ack makes its partition deliverable again:
// the queue's parked polls wake, and other brokers are told
// (Options.OnAvailable); a completed ack tells nobody.
func TestAckRetryWakesPollsAndOtherBrokers(t *testing.T) {
	st := storetest.NewMem()
	pid, _ := st.Push("q", "p", "a", "b")
	type avail struct {
		queue string
		pids  []uuid.UUID
	}
	told := make(chan avail, 4)
	c := New(st, Options{Recheck: time.Hour, OnAvailable: func(q string, pids []uuid.UUID) { told <- avail{q, pids} }})
	res := pop(t, c, queen.PopRequest{Queue: "q", Batch: 1})
	require.Len(t, res.Messages, 1)
	lease := uuid.MustParse(*res.LeaseID)

	acks, err := c.Ack(context.Background(), []queen.AckItem{{PartitionID: pid, Offset: 0, Status: queen.AckCompleted, ConsumerGroup: "g", LeaseID: &lease}})
	require.NoError(t, err)
	require.Equal(t, queen.Acked, acks[0].Result)
	require.Empty(t, told, "a completed ack makes nothing deliverable again")

	res = pop(t, c, queen.PopRequest{Queue: "q", Batch: 1})
	require.Equal(t, []int64{1}, msgOffsets(res.Messages))
	lease = uuid.MustParse(*res.LeaseID)
	done := make(chan queen.PopResult, 1)
	go func() {
		r, _ := c.Pop(context.Background(), queen.PopRequest{Queue: "q", Batch: 1, ConsumerGroup: "g", Wait: true, Timeout: time.Hour})
		done <- r
	}()
	waitParked(t, c, 1)
	acks, err = c.Ack(context.Background(), []queen.AckItem{{PartitionID: pid, Offset: 1, Status: queen.AckFailed, ConsumerGroup: "g", LeaseID: &lease}})
	require.NoError(t, err)
	require.Equal(t, queen.RetryScheduled, acks[0].Result)
	got := <-told
	require.Equal(t, avail{"q", []uuid.UUID{pid}}, got)
	res = <-done
	require.Equal(t, []int64{1}, msgOffsets(res.Messages))
	require.Equal(t, 1, res.Messages[0].RetryCount)
}
