package wire

import (
	"encoding/json"
	"testing"

	"github.com/queen-mq/queen-go"
)

func sampleReplies() []PushReply {
	trace := "tr\"ace\n\u2028"
	return []PushReply{
		{Index: 0, MessageID: "01a22cb2-b061-7e76-ab7e-dce07334288f", TransactionID: "order:1:v1", PartitionID: "01a22cb2-b059-7eaf-a3b1-a6dfbed8332c", QueueName: "orders", Partition: "o-1", Status: queen.Queued},
		{Index: 1, MessageID: "00000000-0000-0000-0000-000000000000", TransactionID: "日本 \\ \"q\" \x01 <&>", PartitionID: "p", TraceID: &trace, QueueName: "q", Partition: "Default", Status: queen.Duplicate},
		{Index: 2, TransactionID: "x", Status: queen.Failed, Error: "the broker is overloaded", Code: "overloaded"},
		{Index: 3, MessageID: "01a22cb2-b061-7e76-ab7e-dce07334288f", TransactionID: "order:1:v1", PartitionID: "p", QueueName: "orders", Partition: "o-1", Status: queen.Duplicate, PayloadMismatch: true},
	}
}

// The hand-written encoder and decoder agree with encoding/json.
func TestPushRepliesRoundTripLikeEncodingJSON(t *testing.T) {
	rs := sampleReplies()
	fast := AppendPushReplies(nil, rs)
	var viaStd []PushReply
	if err := json.Unmarshal(fast, &viaStd); err != nil {
		t.Fatalf("encoding/json cannot read %s: %v", fast, err)
	}
	std, _ := json.Marshal(rs)
	var fromStd []PushReply
	if err := json.Unmarshal(std, &fromStd); err != nil {
		t.Fatal(err)
	}
	for _, body := range [][]byte{fast, std} {
		got, err := DecodePushReplies(body)
		if err != nil {
			t.Fatalf("DecodePushReplies(%s): %v", body, err)
		}
		if len(got) != len(rs) {
			t.Fatalf("got %d replies", len(got))
		}
		for i := range rs {
			a, b := got[i], fromStd[i]
			if a.Index != b.Index || a.MessageID != b.MessageID || a.TransactionID != b.TransactionID || a.PartitionID != b.PartitionID ||
				a.QueueName != b.QueueName || a.Partition != b.Partition || a.Status != b.Status || a.Error != b.Error || a.Code != b.Code || a.PayloadMismatch != b.PayloadMismatch ||
				(a.TraceID == nil) != (b.TraceID == nil) || (a.TraceID != nil && *a.TraceID != *b.TraceID) {
				t.Fatalf("reply %d: got %+v, want %+v", i, a, b)
			}
			if viaStd[i].TransactionID != rs[i].TransactionID {
				t.Fatalf("reply %d: encoding/json read %q from the fast encoding, want %q", i, viaStd[i].TransactionID, rs[i].TransactionID)
			}
		}
	}
	if got, err := DecodePushReplies([]byte(" [ ] ")); err != nil || len(got) != 0 {
		t.Fatalf("empty array: %v %v", got, err)
	}
	for _, bad := range []string{``, `{}`, `[`, `[{"index":1}`, `[{"index":1.5}]`, `[1]`, `[{"status":"queued"}] x`} {
		if _, err := DecodePushReplies([]byte(bad)); err == nil {
			t.Errorf("DecodePushReplies(%q) accepted", bad)
		}
	}
	if got, _ := DecodePushReplies([]byte(`[{"status":"queued","extra":{"a":[1,2]},"trace_id":null}]`)); len(got) != 1 || got[0].Status != queen.Queued || got[0].TraceID != nil {
		t.Fatalf("unknown fields: %+v", got)
	}
}

// payloadMismatch is on the wire only when true (SPEC.md §6), and only a
// duplicate carries it.
func TestPayloadMismatchOnTheWire(t *testing.T) {
	rs := sampleReplies()
	for i, r := range rs {
		b, _ := r.MarshalJSON()
		has := containsKey(b, "payloadMismatch")
		if has != r.PayloadMismatch {
			t.Fatalf("reply %d %s: payloadMismatch present = %v, want %v", i, b, has, r.PayloadMismatch)
		}
	}
	b, _ := rs[3].MarshalJSON()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil || m["payloadMismatch"] != true {
		t.Fatalf("%s: want \"payloadMismatch\":true", b)
	}
	if got, err := DecodePushReplies([]byte(`[{"status":"duplicate","payloadMismatch":false},{"status":"duplicate","payloadMismatch":true}]`)); err != nil || got[0].PayloadMismatch || !got[1].PayloadMismatch {
		t.Fatalf("decode: %+v %v", got, err)
	}
	item := &queen.Item{Queue: "q", Partition: "p", TransactionID: "t"}
	if p := Reply(0, item, queen.Result{Verdict: queen.Duplicate, PayloadMismatch: true}); !p.PayloadMismatch {
		t.Fatal("Reply drops a duplicate's payload mismatch")
	}
	if p := Reply(0, item, queen.Result{Verdict: queen.Queued, PayloadMismatch: true}); p.PayloadMismatch {
		t.Fatal("Reply puts payloadMismatch on a queued item")
	}
}

func containsKey(b []byte, key string) bool {
	var m map[string]json.RawMessage
	if json.Unmarshal(b, &m) != nil {
		return false
	}
	_, ok := m[key]
	return ok
}

func FuzzAppendJSONString(f *testing.F) {
	for _, s := range []string{"", "a", "日本", "\x00\x1f\"\\", "\xff\xfe", "\u2028<>&"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var got string
		if err := json.Unmarshal(AppendJSONString(nil, s), &got); err != nil {
			t.Fatalf("invalid JSON for %q: %v", s, err)
		}
		want, _ := json.Marshal(s)
		var w string
		json.Unmarshal(want, &w) //nolint:errcheck
		if got != w {
			t.Fatalf("%q decodes to %q, encoding/json gives %q", s, got, w)
		}
	})
}

func BenchmarkPushReplies(b *testing.B) {
	rs := make([]PushReply, 100)
	for i := range rs {
		rs[i] = sampleReplies()[0]
		rs[i].Index = i
	}
	body := AppendPushReplies(nil, rs)
	b.Run("append", func(b *testing.B) {
		var buf []byte
		for b.Loop() {
			buf = AppendPushReplies(buf[:0], rs)
		}
	})
	b.Run("encoding-json-marshal", func(b *testing.B) {
		for b.Loop() {
			json.Marshal(rs) //nolint:errcheck
		}
	})
	b.Run("decode", func(b *testing.B) {
		for b.Loop() {
			DecodePushReplies(body) //nolint:errcheck
		}
	})
	b.Run("encoding-json-unmarshal", func(b *testing.B) {
		for b.Loop() {
			var out []PushReply
			json.Unmarshal(body, &out) //nolint:errcheck
		}
	})
}
