package broker

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestPushVerdicts walks the verdict table of SPEC.md §3 through both
// transports, one queue per subtest.
func TestPushVerdicts(t *testing.T) {
	e := startEnv(t, nil)

	for _, via := range transports {
		t.Run(via, func(t *testing.T) {
			t.Run("duplicate_in_window", func(t *testing.T) {
				q := "dup-" + via
				first := e.pushOK(t, via, items(item{"queue": q, "partition": "p1", "transactionId": "order:8812:v3", "payload": map[string]any{"n": 1}}), 1)[0]
				eq(t, "queued", first.Status, "first push")
				mustV7(t, first.MessageID, "message_id")
				mustV7(t, first.PartitionID, "partition_id")
				eq(t, "order:8812:v3", first.TransactionID, "transaction_id")
				eq(t, q, first.QueueName, "queueName")
				eq(t, "p1", first.Partition, "partition")
				if first.TraceID != nil {
					t.Fatalf("trace_id = %q, want null", *first.TraceID)
				}
				before := e.stats(t, q)
				eq(t, int64(1), before.Messages, "messages after the first push")

				// Same id, other payload: still a duplicate (the key is the id alone).
				for i := 0; i < 2; i++ {
					dup := e.pushOK(t, via, items(item{"queue": q, "partition": "p1", "transactionId": "order:8812:v3", "payload": map[string]any{"n": 2}}), 1)[0]
					eq(t, "duplicate", dup.Status, "repeat %d", i)
					eq(t, first.MessageID, dup.MessageID, "duplicate's message_id is the original's")
					eq(t, first.PartitionID, dup.PartitionID, "partition_id")
					eq(t, "order:8812:v3", dup.TransactionID, "transaction_id")
				}
				eq(t, before, e.stats(t, q), "database after duplicates (nothing written)")
				fs := e.frames(t, q, "p1")
				eq(t, 1, len(fs), "stored frames")
				jsonEq(t, []byte(`{"n":1}`), fs[0].Payload, "stored payload is the original's")
				eq(t, first.MessageID, fs[0].MessageID.String(), "stored message id")
			})

			t.Run("other_partition_and_queue", func(t *testing.T) {
				q, q2 := "scope-"+via, "scope2-"+via
				a := e.pushOK(t, via, items(it(q, "p1", "same-id")), 1)[0]
				b := e.pushOK(t, via, items(it(q, "p2", "same-id")), 1)[0]
				c := e.pushOK(t, via, items(it(q2, "p1", "same-id")), 1)[0]
				for _, r := range []reply{a, b, c} {
					eq(t, "queued", r.Status, "push of %s/%s", r.QueueName, r.Partition)
				}
				if a.MessageID == b.MessageID || a.MessageID == c.MessageID || a.PartitionID == b.PartitionID || a.PartitionID == c.PartitionID {
					t.Fatalf("expected independent messages in independent partitions: %+v %+v %+v", a, b, c)
				}
				// Bundled in one request: verdicts are per partition.
				rs := e.pushOK(t, via, items(it(q, "p3", "bundled"), it(q, "p4", "bundled"), it(q2, "p3", "bundled")), 3)
				wantStatuses(t, rs, "queued", "queued", "queued")
				// And the scope still holds per partition afterwards.
				d := e.pushOK(t, via, items(it(q, "p2", "same-id")), 1)[0]
				eq(t, "duplicate", d.Status, "repeat in p2")
				eq(t, b.MessageID, d.MessageID, "repeat in p2 echoes p2's original")
				eq(t, int64(4), e.stats(t, q).Messages, "messages in %s", q)
				eq(t, int64(2), e.stats(t, q2).Messages, "messages in %s", q2)
			})

			t.Run("in_request_leader_follower", func(t *testing.T) {
				q := "leader-" + via
				rs := e.pushOK(t, via, items(it(q, "p", "L1"), it(q, "p", "L1")), 2)
				wantStatuses(t, rs, "queued", "duplicate")
				eq(t, rs[0].MessageID, rs[1].MessageID, "follower echoes the leader's message_id")
				fs := e.frames(t, q, "p")
				eq(t, 1, len(fs), "one frame for leader + follower")
				eq(t, rs[0].MessageID, fs[0].MessageID.String(), "stored id")

				rs = e.pushOK(t, via, items(it(q, "p", "L2"), it(q, "p", "L3"), it(q, "p", "L2"), it(q, "p", "L3"), it(q, "p", "L2")), 5)
				wantStatuses(t, rs, "queued", "queued", "duplicate", "duplicate", "duplicate")
				eq(t, rs[0].MessageID, rs[2].MessageID, "L2 follower")
				eq(t, rs[0].MessageID, rs[4].MessageID, "L2 second follower")
				eq(t, rs[1].MessageID, rs[3].MessageID, "L3 follower")
				st := e.stats(t, q)
				eq(t, int64(3), st.Messages, "messages")
				eq(t, int64(3), st.Hashes, "sidecar entries")
				eq(t, st.Messages, st.LastOffsets, "allocator matches stored messages")
			})

			t.Run("mixed_request", func(t *testing.T) {
				q := "mixed-" + via
				a := e.pushOK(t, via, items(it(q, "p", "a")), 1)[0]
				eq(t, "queued", a.Status, "a")
				rs := e.pushOK(t, via, items(it(q, "p", "b"), it(q, "p", "a"), it(q, "p", "c")), 3)
				wantStatuses(t, rs, "queued", "duplicate", "queued")
				eq(t, a.MessageID, rs[1].MessageID, "a's repeat echoes a")
				fs := e.frames(t, q, "p")
				eq(t, 3, len(fs), "stored messages (a + b + c)")
				got := []string{fs[0].TransactionID, fs[1].TransactionID, fs[2].TransactionID}
				eq(t, "a,b,c", strings.Join(got, ","), "stored order")
				eq(t, rs[0].MessageID, fs[1].MessageID.String(), "b's id")
				eq(t, rs[2].MessageID, fs[2].MessageID.String(), "c's id")
				for i, f := range fs {
					eq(t, int64(i), f.Offset, "offset of %s", f.TransactionID)
				}
			})

			t.Run("window_zero", func(t *testing.T) {
				q := "nodedup-" + via
				e.configureOK(t, via, marshal(map[string]any{"queue": q, "options": map[string]any{"dedupWindowSeconds": 0}}))
				rs := e.pushOK(t, via, items(it(q, "p", "X"), it(q, "p", "X")), 2)
				wantStatuses(t, rs, "queued", "queued")
				if rs[0].MessageID == rs[1].MessageID {
					t.Fatalf("window 0: in-request repeat got the same message id %s", rs[0].MessageID)
				}
				eq(t, int64(2), e.stats(t, q).Messages, "stored after [X, X]")
				r := e.pushOK(t, via, items(it(q, "p", "X")), 1)[0]
				eq(t, "queued", r.Status, "window 0: later repeat")
				st := e.stats(t, q)
				eq(t, int64(3), st.Messages, "stored after the third X")
				eq(t, int64(3), st.Hashes, "the sidecar is written with the check off")
				eq(t, 3, txnCounts(e.frames(t, q, "p"))["X"], "frames of X")
			})

			t.Run("configure_takes_effect_next_push", func(t *testing.T) {
				q := "switch-" + via
				e.configureOK(t, via, marshal(map[string]any{"queue": q, "options": map[string]any{"dedupWindowSeconds": 0}}))
				r1 := e.pushOK(t, via, items(it(q, "p", "S")), 1)[0]
				r2 := e.pushOK(t, via, items(it(q, "p", "S")), 1)[0]
				wantStatuses(t, []reply{r1, r2}, "queued", "queued")
				// Full replace without options: back to 3600, for the very next push.
				e.configureOK(t, via, marshal(map[string]any{"queue": q}))
				before := e.stats(t, q)
				d := e.pushOK(t, via, items(it(q, "p", "S")), 1)[0]
				eq(t, "duplicate", d.Status, "after turning the window back on")
				if d.MessageID != r1.MessageID && d.MessageID != r2.MessageID {
					t.Fatalf("duplicate echoes %s, want one of the originals %s / %s", d.MessageID, r1.MessageID, r2.MessageID)
				}
				eq(t, before, e.stats(t, q), "nothing written by the duplicate")
				e.configureOK(t, via, marshal(map[string]any{"queue": q, "options": map[string]any{"dedupWindowSeconds": 0}}))
				r3 := e.pushOK(t, via, items(it(q, "p", "S")), 1)[0]
				eq(t, "queued", r3.Status, "after turning the window off again")
				eq(t, int64(3), e.stats(t, q).Messages, "stored")
			})

			t.Run("default_window_3600", func(t *testing.T) {
				q := "defwin-" + via
				e.configureOK(t, via, marshal(map[string]any{"queue": q, "options": map[string]any{"leaseTime": 60}}))
				eq(t, float64(3600), e.queueOption(t, via, q, "dedupWindowSeconds"), "dedupWindowSeconds of a queue configured without it")
				eq(t, int64(3600), e.dbWindow(t, q), "queues.dedup_window_seconds")
				rs := e.pushOK(t, via, items(it(q, "p", "w")), 1)
				rs2 := e.pushOK(t, via, items(it(q, "p", "w")), 1)
				wantStatuses(t, []reply{rs[0], rs2[0]}, "queued", "duplicate")
				// A queue created by its first push has the defaults too.
				q2 := "defwin-auto-" + via
				e.pushOK(t, via, items(it(q2, "", "w")), 1)
				eq(t, float64(3600), e.queueOption(t, via, q2, "dedupWindowSeconds"), "dedupWindowSeconds of a queue created by push")
				eq(t, int64(3600), e.dbWindow(t, q2), "queues.dedup_window_seconds of a queue created by push")
			})

			t.Run("empty_items", func(t *testing.T) {
				before := e.totalRows(t)
				r := e.pushR(t, via, []byte(`{"items":[]}`))
				eq(t, http.StatusCreated, r.Status, "status")
				eq(t, "[]", string(bytes.TrimSpace(r.Raw)), "body")
				eq(t, before, e.totalRows(t), "rows")
			})

			t.Run("default_partition", func(t *testing.T) {
				q := "defpart-" + via
				body := []byte(`{"items":[{"queue":"` + q + `","transactionId":"d1"},{"queue":"` + q + `","partition":"","transactionId":"d2"},{"queue":"` + q + `","partition":null,"transactionId":"d3"}]}`)
				rs := e.pushOK(t, via, body, 3)
				wantStatuses(t, rs, "queued", "queued", "queued")
				for _, r := range rs {
					eq(t, "Default", r.Partition, "partition of %s", r.TransactionID)
					eq(t, rs[0].PartitionID, r.PartitionID, "partition_id of %s", r.TransactionID)
				}
				fs := e.frames(t, q, "Default")
				eq(t, 3, len(fs), "frames in partition Default")
				st := e.stats(t, q)
				eq(t, int64(1), st.Partitions, "partitions")
			})

			t.Run("generated_transaction_id", func(t *testing.T) {
				q := "gen-" + via
				body := []byte(`{"items":[{"queue":"` + q + `","partition":"p"},{"queue":"` + q + `","partition":"p","transactionId":null},{"queue":"` + q + `","partition":"p","transactionId":""}]}`)
				seen := map[string]bool{}
				for round := 0; round < 2; round++ {
					rs := e.pushOK(t, via, body, 3)
					wantStatuses(t, rs, "queued", "queued", "queued")
					for _, r := range rs {
						mustV7(t, r.TransactionID, "generated transactionId")
						if seen[r.TransactionID] {
							t.Fatalf("generated transactionId %s is not unique", r.TransactionID)
						}
						seen[r.TransactionID] = true
					}
				}
				fs := e.frames(t, q, "p")
				eq(t, 6, len(fs), "stored")
				for _, f := range fs {
					if !seen[f.TransactionID] {
						t.Fatalf("stored transactionId %q was not in a reply", f.TransactionID)
					}
				}
			})

			t.Run("data_alias_payload_and_trace", func(t *testing.T) {
				q := "data-" + via
				body := []byte(`{"items":[` +
					`{"queue":"` + q + `","partition":"p","transactionId":"t-data","data":{"k":"v","n":[1,2]}},` +
					`{"queue":"` + q + `","partition":"p","transactionId":"t-none","traceId":"trace-1"},` +
					`{"queue":"` + q + `","partition":"p","transactionId":"t-str","payload":"just a string"},` +
					`{"queue":"` + q + `","partition":"p","transactionId":"t-num","payload":42}]}`)
				rs := e.pushOK(t, via, body, 4)
				wantStatuses(t, rs, "queued", "queued", "queued", "queued")
				if rs[1].TraceID == nil || *rs[1].TraceID != "trace-1" {
					t.Fatalf("trace_id not echoed: %+v", rs[1])
				}
				fs := e.frames(t, q, "p")
				eq(t, 4, len(fs), "stored")
				jsonEq(t, []byte(`{"k":"v","n":[1,2]}`), fs[0].Payload, "payload given as data")
				jsonEq(t, []byte(`{}`), fs[1].Payload, "default payload")
				jsonEq(t, []byte(`"just a string"`), fs[2].Payload, "string payload")
				jsonEq(t, []byte(`42`), fs[3].Payload, "number payload")
				if fs[1].TraceID == nil || *fs[1].TraceID != "trace-1" {
					t.Fatalf("stored trace id: %v", fs[1].TraceID)
				}
				if fs[0].TraceID != nil {
					t.Fatalf("stored trace id of an item without one: %q", *fs[0].TraceID)
				}
			})
		})
	}

	// The window closing takes ~2 s of wall time: both transports at once.
	for _, via := range transports {
		t.Run("window_closed/"+via, func(t *testing.T) {
			t.Parallel()
			q := "winclose-" + via
			e.configureOK(t, via, marshal(map[string]any{"queue": q, "options": map[string]any{"dedupWindowSeconds": 2}}))
			body := items(it(q, "p", "late-repeat"))
			start := time.Now()
			first := e.pushOK(t, via, body, 1)[0]
			eq(t, "queued", first.Status, "original")
			dup := e.pushOK(t, via, body, 1)[0]
			eq(t, "duplicate", dup.Status, "immediate repeat inside the 2 s window")
			eq(t, first.MessageID, dup.MessageID, "immediate repeat's message_id")
			var again reply
			tries := 0
			eventually(t, 10*time.Second, 100*time.Millisecond, "repeat accepted after the window", func() (bool, string) {
				tries++
				r := e.pushOK(t, via, body, 1)[0]
				switch r.Status {
				case "duplicate":
					eq(t, first.MessageID, r.MessageID, "repeat's message_id inside the window")
					eq(t, int64(1), e.stats(t, q).Messages, "stored while the repeat is a duplicate")
					return false, "duplicate"
				case "queued":
					again = r
					return true, ""
				}
				t.Fatalf("unexpected verdict %+v", r)
				return false, ""
			})
			elapsed := time.Since(start)
			if elapsed < 1900*time.Millisecond {
				t.Fatalf("the repeat was accepted %v after the original was sent; the window is 2 s", elapsed)
			}
			if again.MessageID == first.MessageID {
				t.Fatalf("the message after the window reuses the original's id %s", first.MessageID)
			}
			fs := e.frames(t, q, "p")
			eq(t, 2, len(fs), "stored after the window")
			eq(t, 2, txnCounts(fs)["late-repeat"], "copies of late-repeat")
			// The new message opens a new window.
			d := e.pushOK(t, via, body, 1)[0]
			eq(t, "duplicate", d.Status, "repeat of the new message")
			eq(t, again.MessageID, d.MessageID, "echoes the new message")
			t.Logf("%s: %d tries, window closed after %v", via, tries, elapsed)
		})
	}
}

// TestJSONEscapes: escaped and raw forms of the same id are one dedup key
// (SPEC.md §10).
func TestJSONEscapes(t *testing.T) {
	e := startEnv(t, nil)
	pairs := []struct{ name, first, second, value string }{
		{"ampersand", `Bed&Breakfast-771`, `Bed\u0026Breakfast-771`, "Bed&Breakfast-771"},
		{"slash", `2026\/07\/BK-11`, `2026/07/BK-11`, "2026/07/BK-11"},
		{"non_ascii", `\u65e5\u672c`, `日本`, "日本"},
		{"non_ascii_raw_first", `予約-日本`, `\u4e88\u7d04-\u65e5\u672c`, "予約-日本"},
	}
	for _, via := range transports {
		t.Run(via, func(t *testing.T) {
			for _, p := range pairs {
				t.Run(p.name, func(t *testing.T) {
					q := "esc-" + p.name + "-" + via
					mk := func(txn string) []byte {
						return []byte(`{"items":[{"queue":"` + q + `","partition":"p","transactionId":"` + txn + `"}]}`)
					}
					a := e.pushOK(t, via, mk(p.first), 1)[0]
					eq(t, "queued", a.Status, "first form %s", p.first)
					eq(t, p.value, a.TransactionID, "transaction_id of the first form")
					b := e.pushOK(t, via, mk(p.second), 1)[0]
					eq(t, "duplicate", b.Status, "second form %s", p.second)
					eq(t, a.MessageID, b.MessageID, "second form echoes the first")
					eq(t, p.value, b.TransactionID, "transaction_id of the second form")
					fs := e.frames(t, q, "p")
					eq(t, 1, len(fs), "stored")
					eq(t, p.value, fs[0].TransactionID, "stored transactionId (unescaped)")
				})
			}
			t.Run("partition_and_queue_names", func(t *testing.T) {
				q := "esc-names-" + via
				raw := []byte(`{"items":[{"queue":"` + q + `","partition":"Bed&Breakfast/日本","transactionId":"n1"}]}`)
				esc := []byte(`{"items":[{"queue":"` + strings.ReplaceAll(q, "-", `\u002d`) + `","partition":"Bed\u0026Breakfast\/\u65e5\u672c","transactionId":"n1"}]}`)
				a := e.pushOK(t, via, raw, 1)[0]
				b := e.pushOK(t, via, esc, 1)[0]
				wantStatuses(t, []reply{a, b}, "queued", "duplicate")
				eq(t, a.PartitionID, b.PartitionID, "escaped partition name is the same partition")
				eq(t, q, b.QueueName, "queueName of the escaped form")
				eq(t, "Bed&Breakfast/日本", b.Partition, "partition of the escaped form")
				eq(t, int64(1), e.stats(t, q).Partitions, "partitions")
			})
		})
	}
}

// TestDuplicateOfDeletedSegment: the original's segment is gone but its
// sidecar entries are in the window → duplicate with the zero UUID (SPEC.md §3).
func TestDuplicateOfDeletedSegment(t *testing.T) {
	e := startEnv(t, nil)
	for _, via := range transports {
		t.Run(via, func(t *testing.T) {
			q := "retained-" + via
			orig := e.pushOK(t, via, items(it(q, "p", "gone-1"), it(q, "p", "kept")), 2)
			wantStatuses(t, orig, "queued", "queued")
			tag, err := e.db.Exec(context.Background(), `DELETE FROM queen.segments WHERE partition_num = (SELECT num FROM queen.partitions WHERE id = $1)`, orig[0].PartitionID)
			if err != nil {
				t.Fatal(err)
			}
			eq(t, int64(1), tag.RowsAffected(), "segments deleted")
			before := e.stats(t, q)
			eq(t, int64(0), before.Segments, "segments left")
			eq(t, int64(1), before.SidecarSegments, "sidecar entries kept")
			rs := e.pushOK(t, via, items(it(q, "p", "gone-1"), it(q, "p", "kept")), 2)
			wantStatuses(t, rs, "duplicate", "duplicate")
			for _, r := range rs {
				eq(t, zeroUUID, r.MessageID, "message_id of a duplicate whose original is gone")
				eq(t, orig[0].PartitionID, r.PartitionID, "partition_id")
			}
			eq(t, before, e.stats(t, q), "nothing written")
			// A new id in the same partition still gets the next offset.
			n := e.pushOK(t, via, items(it(q, "p", "new")), 1)[0]
			eq(t, "queued", n.Status, "new id")
			fs := e.frames(t, q, "p")
			eq(t, 1, len(fs), "stored after the new push")
			eq(t, int64(2), fs[0].Offset, "offset of the new message")
		})
	}
}

// TestConcurrentSameTransactionID: 32 producers race on one id in one
// partition → exactly one queued, 31 duplicates echoing its id, one stored.
func TestConcurrentSameTransactionID(t *testing.T) {
	e := startEnv(t, nil)
	const n = 32
	for _, via := range transports {
		t.Run(via, func(t *testing.T) {
			for round := 0; round < 2; round++ {
				q := fmt.Sprintf("race-%s-%d", via, round)
				body := items(item{"queue": q, "partition": "hot", "transactionId": "the-one", "payload": map[string]any{"round": round}})
				results := make([]result, n)
				errs := make([]error, n)
				gate := make(chan struct{})
				var wg sync.WaitGroup
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				for i := 0; i < n; i++ {
					wg.Add(1)
					go func(i int) {
						defer wg.Done()
						<-gate
						results[i], errs[i] = e.tryPush(ctx, via, body)
					}(i)
				}
				close(gate)
				wg.Wait()
				cancel()
				var queued []reply
				var dups []reply
				for i := range results {
					if errs[i] != nil {
						t.Fatalf("push %d: %v", i, errs[i])
					}
					r := results[i]
					if r.Status != http.StatusCreated || len(r.Items) != 1 {
						t.Fatalf("push %d: status %d body %s", i, r.Status, clip(r.Raw))
					}
					switch r.Items[0].Status {
					case "queued":
						queued = append(queued, r.Items[0])
					case "duplicate":
						dups = append(dups, r.Items[0])
					default:
						t.Fatalf("push %d: verdict %+v", i, r.Items[0])
					}
				}
				eq(t, 1, len(queued), "queued replies")
				eq(t, n-1, len(dups), "duplicate replies")
				for _, d := range dups {
					eq(t, queued[0].MessageID, d.MessageID, "duplicate echoes the winner")
				}
				fs := e.frames(t, q, "hot")
				eq(t, 1, len(fs), "stored messages")
				eq(t, queued[0].MessageID, fs[0].MessageID.String(), "stored id is the winner's")
				st := e.stats(t, q)
				eq(t, int64(0), st.LastOffsets-1, "allocator: one offset allocated")
				eq(t, int64(1), st.Hashes, "sidecar entries")
			}
		})
	}
}
