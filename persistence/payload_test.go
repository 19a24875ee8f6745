package persistence

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	queen "github.com/queen-mq/queen-go"
)

// item builds one push item with an explicit payload (raw JSON text).
func payloadItem(queueName, partition, txn, payload string) *queen.Item {
	return &queen.Item{Queue: queueName, Partition: partition, TransactionID: txn, Payload: json.RawMessage(payload), Hash: queen.HashTxn(txn)}
}

func checkPayload(t testing.TB, s *Store, queueName string, on bool) {
	t.Helper()
	res, err := s.Configure(context.Background(), queen.ConfigureRequest{Queue: queueName,
		Options: queen.OptionsPatch{DedupCheckPayload: &on}})
	require.NoError(t, err)
	require.Equal(t, on, res.Options.DedupCheckPayload)
}

func mismatches(out queen.PushOutcome) []bool {
	m := make([]bool, len(out.Results))
	for i, r := range out.Results {
		m[i] = r.PayloadMismatch
	}
	return m
}

func segmentCount(t testing.TB, s *Store, pid uuid.UUID) int {
	t.Helper()
	var n int
	require.NoError(t, s.pool.QueryRow(context.Background(), `SELECT count(*) FROM queen.segments WHERE partition_num = (SELECT num FROM queen.partitions WHERE id = $1)`, pid).Scan(&n))
	return n
}

// SPEC.md §6 dedupCheckPayload: a duplicate whose payload bytes differ from
// the original's as stored stays a duplicate of the original and is marked;
// with the option off nothing is marked.
func TestCommitMarksPayloadMismatch(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	checkPayload(t, s, "on", true)
	on, err := s.EnsurePartition(ctx, "on", "p")
	require.NoError(t, err)
	off, err := s.EnsurePartition(ctx, "off", "p")
	require.NoError(t, err)

	for _, c := range []struct {
		name  string
		pid   uuid.UUID
		queue string
		check bool
	}{{"on", on, "on", true}, {"off", off, "off", false}} {
		t.Run(c.name, func(t *testing.T) {
			q := c.queue
			// Originals in two segments, one with a trace id (frames are
			// skipped to reach the original's).
			trace := "tr-1"
			first := commit(t, s, c.pid, []*queen.Item{
				payloadItem(q, "p", "a", `{"n":1}`),
				{Queue: q, Partition: "p", TransactionID: "b", TraceID: &trace, Payload: json.RawMessage(`"bee"`), Hash: queen.HashTxn("b")},
				payloadItem(q, "p", "c", `[1,2,3]`),
			})
			commit(t, s, c.pid, []*queen.Item{payloadItem(q, "p", "d", `{"n":4}`)})
			require.Equal(t, 2, segmentCount(t, s, c.pid))

			out := commit(t, s, c.pid, []*queen.Item{
				payloadItem(q, "p", "a", `{"n":1}`),       // same bytes
				payloadItem(q, "p", "c", `[1,2,4]`),       // differs
				payloadItem(q, "p", "b", `"bee"`),         // same (after a traced frame)
				payloadItem(q, "p", "d", `{"n": 4}`),      // same JSON value, other bytes: differs as stored
				payloadItem(q, "p", "e", `{"new":true}`),  // new
				payloadItem(q, "p", "e", `{"new":false}`), // repeat of a new item, differs from its leader
				payloadItem(q, "p", "e", `{"new":true}`),  // repeat of a new item, same as its leader
				payloadItem(q, "p", "c", `[1,2,3]`),       // repeat of a duplicate, same as the original
				payloadItem(q, "p", "a", `{"n":2}`),       // repeat of a duplicate, differs from the original
			})
			D, Q := queen.Duplicate, queen.Queued
			require.Equal(t, []queen.Verdict{D, D, D, D, Q, D, D, D, D}, verdicts(out))
			want := []bool{false, true, false, true, false, true, false, false, true}
			if !c.check {
				want = make([]bool, len(want))
			}
			require.Equal(t, want, mismatches(out))
			require.Equal(t, first.Results[2].MessageID, out.Results[1].MessageID, "a mismatch still answers the original's id")
			require.Equal(t, first.Results[0].MessageID, out.Results[8].MessageID)
			require.Equal(t, out.Results[4].MessageID, out.Results[5].MessageID, "a follower echoes its leader")
			require.Equal(t, 3, segmentCount(t, s, c.pid), "only the new item was written")

			// All duplicates (nothing written): compared as well.
			out = commit(t, s, c.pid, []*queen.Item{payloadItem(q, "p", "e", `{"new":true}`), payloadItem(q, "p", "e", `{"new":1}`)})
			require.Equal(t, []queen.Verdict{D, D}, verdicts(out))
			require.Equal(t, []bool{false, c.check}, mismatches(out))
			require.Equal(t, 3, segmentCount(t, s, c.pid))

			// A warm cache's narrowed probe (the original found through a
			// suspect) finds the same original.
			out, err := s.Commit(ctx, &queen.PushBatch{PartitionID: c.pid, Items: []*queen.Item{payloadItem(q, "p", "d", `{"n":5}`)},
				Watermark: 3, AssumedWindow: 3600, Suspects: map[queen.Hash]queen.Span{queen.HashTxn("d"): {}}})
			require.NoError(t, err)
			require.Equal(t, []bool{c.check}, mismatches(out))
			// ... and through the sidecar rows above the watermark.
			out, err = s.Commit(ctx, &queen.PushBatch{PartitionID: c.pid, Items: []*queen.Item{payloadItem(q, "p", "d", `{"n":5}`)},
				Watermark: 2, AssumedWindow: 3600})
			require.NoError(t, err)
			require.Equal(t, queen.Duplicate, out.Results[0].Verdict)
			require.Equal(t, []bool{c.check}, mismatches(out))
		})
	}
}

// Turning the option off stops the comparison at the next push (it is read
// under the lock, like the window); an original whose segment is gone is
// not compared.
func TestPayloadMismatchOptionAndGoneOriginal(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	checkPayload(t, s, "q", true)
	pid, err := s.EnsurePartition(ctx, "q", "p")
	require.NoError(t, err)
	commit(t, s, pid, []*queen.Item{payloadItem("q", "p", "a", `1`)})
	require.Equal(t, []bool{true}, mismatches(commit(t, s, pid, []*queen.Item{payloadItem("q", "p", "a", `2`)})))
	checkPayload(t, s, "q", false)
	require.Equal(t, []bool{false}, mismatches(commit(t, s, pid, []*queen.Item{payloadItem("q", "p", "a", `2`)})))
	checkPayload(t, s, "q", true)

	_, err = s.pool.Exec(ctx, `DELETE FROM queen.segments WHERE partition_num = (SELECT num FROM queen.partitions WHERE id = $1)`, pid)
	require.NoError(t, err)
	out := commit(t, s, pid, []*queen.Item{payloadItem("q", "p", "a", `2`)})
	require.Equal(t, queen.Duplicate, out.Results[0].Verdict)
	require.Equal(t, queen.ZeroUUID, out.Results[0].MessageID)
	require.False(t, out.Results[0].PayloadMismatch, "an original that is gone cannot be compared")
}

// In a bundle, each partition follows its own queue's option.
func TestPayloadMismatchPerPartitionInABundle(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	checkPayload(t, s, "on", true)
	on, err := s.EnsurePartition(ctx, "on", "p")
	require.NoError(t, err)
	off, err := s.EnsurePartition(ctx, "off", "p")
	require.NoError(t, err)
	commit(t, s, on, []*queen.Item{payloadItem("on", "p", "a", `1`)})
	commit(t, s, off, []*queen.Item{payloadItem("off", "p", "a", `1`)})
	mk := func(pid uuid.UUID, q string) *queen.PushBatch {
		its := []*queen.Item{payloadItem(q, "p", "a", `2`), payloadItem(q, "p", "b", `3`), payloadItem(q, "p", "b", `4`)}
		return &queen.PushBatch{PartitionID: pid, Items: its, LeaderOf: leadersOf(its), Watermark: -1}
	}
	outs, err := s.CommitBundle(ctx, []*queen.PushBatch{mk(off, "off"), mk(on, "on")})
	require.NoError(t, err)
	require.Equal(t, []bool{false, false, false}, mismatches(outs[0]))
	require.Equal(t, []bool{true, false, true}, mismatches(outs[1]))
}

func TestFramePayload(t *testing.T) {
	trace := "t"
	var frames []byte
	payloads := []string{`{"x":1}`, `[]`, ``, `"` + string(make([]byte, 300)) + `"`}
	for i, p := range payloads {
		var tr *string
		if i%2 == 0 {
			tr = &trace
		}
		frames = AppendFrame(frames, "txn", tr, []byte(p))
	}
	for k, p := range payloads {
		got, err := FramePayload(frames, k)
		require.NoError(t, err)
		require.Equal(t, p, string(got))
	}
	_, err := FramePayload(frames, len(payloads))
	require.ErrorIs(t, err, ErrCorruptSegment)
	_, err = FramePayload(frames, -1)
	require.ErrorIs(t, err, ErrCorruptSegment)
	_, err = FramePayload(frames[:len(frames)-1], len(payloads)-1)
	require.ErrorIs(t, err, ErrCorruptSegment)
}

// BenchmarkPayloadCheck: commits of 100 items of ~200-byte payloads to one
// partition, with dedupCheckPayload off and on: all new (the option must
// cost nothing there), and all duplicates of one earlier segment of 100
// (the option reads that segment once per commit).
//
//	go test -run '^$' -bench BenchmarkPayloadCheck -benchtime 300x ./persistence
func BenchmarkPayloadCheck(b *testing.B) {
	payload := json.RawMessage(`{"orderId":123456,"customer":"Bed&Breakfast-771","amount":1234.56,"currency":"EUR","items":[{"sku":"BK-11","qty":2},{"sku":"BK-12","qty":1}],"note":"deliver to the back door, ring twice","paid":true}`)
	batch := func(q, prefix string, from int) []*queen.Item {
		its := make([]*queen.Item, 100)
		for i := range its {
			t := fmt.Sprintf("%s-%d", prefix, from+i)
			its[i] = &queen.Item{Queue: q, Partition: "p", TransactionID: t, Payload: payload, Hash: queen.HashTxn(t)}
		}
		return its
	}
	for _, on := range []bool{false, true} {
		s := setup(b)
		ctx := context.Background()
		q := fmt.Sprintf("check-%v", on)
		checkPayload(b, s, q, on)
		pid, err := s.EnsurePartition(ctx, q, "p")
		require.NoError(b, err)
		b.Run(fmt.Sprintf("check=%v/new", on), func(b *testing.B) {
			n := 0
			for b.Loop() {
				out := commit(b, s, pid, batch(q, "new", n))
				n += 100
				if out.Results[0].Verdict != queen.Queued {
					b.Fatal(out.Results[0])
				}
			}
		})
		commit(b, s, pid, batch(q, "dup", 0))
		b.Run(fmt.Sprintf("check=%v/duplicates", on), func(b *testing.B) {
			its := batch(q, "dup", 0)
			its[7] = &queen.Item{Queue: q, Partition: "p", TransactionID: its[7].TransactionID, Payload: json.RawMessage(`{}`), Hash: its[7].Hash}
			for b.Loop() {
				out := commit(b, s, pid, its)
				if out.Results[0].Verdict != queen.Duplicate || out.Results[7].PayloadMismatch != on {
					b.Fatal(out.Results[7])
				}
			}
		})
	}
}
