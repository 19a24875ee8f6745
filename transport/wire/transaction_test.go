package wire

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/queen-mq/queen-go"
)

func TestDecodeTransaction(t *testing.T) {
	lease := uuid.NewString()
	pid := uuid.NewString()
	body := `{"operations":[
		{"type":"ack","transactionId":"m1","partitionId":"` + pid + `","status":"completed"},
		{"type":"push","items":[{"queue":"out","payload":{"n":1},"transactionId":"Bed\u0026Breakfast"},{"queue":"out","partition":"p2","data":[1]}]},
		{"type":"push","queue":"flat","transactionId":"f1","payload":"x"},
		{"type":"ack","offset":7,"partitionId":"` + pid + `","consumerGroup":"g","status":"failed","error":"boom","leaseId":"` + lease + `"},
		{"type":"push","items":[]}
	],"requiredLeases":["` + lease + `","",null,"` + lease + `"]}`
	req, err := DecodeTransaction([]byte(body), 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(req.Ops) != 5 {
		t.Fatalf("%d operations", len(req.Ops))
	}
	a := req.Ops[0]
	if a.Type != queen.TxnAck || a.Ack.TransactionID != "m1" || a.Ack.Hash != queen.HashTxn("m1") || a.Ack.Offset != -1 ||
		a.Ack.PartitionID.String() != pid || a.Ack.ConsumerGroup != queen.DefaultConsumerGroup || a.Ack.Status != queen.AckCompleted {
		t.Fatalf("ack: %+v", a)
	}
	p := req.Ops[1]
	if p.Type != queen.TxnPush || len(p.Items) != 2 {
		t.Fatalf("push: %+v", p)
	}
	if it := p.Items[0]; it.Queue != "out" || it.Partition != queen.DefaultPartition || it.TransactionID != "Bed&Breakfast" ||
		it.Hash != queen.HashTxn("Bed&Breakfast") || string(it.Payload) != `{"n":1}` {
		t.Fatalf("item 0: %+v", it)
	}
	if it := p.Items[1]; it.Partition != "p2" || string(it.Payload) != `[1]` || uuid.MustParse(it.TransactionID).Version() != 7 {
		t.Fatalf("item 1 (data alias, generated id): %+v", it)
	}
	if f := req.Ops[2]; f.Type != queen.TxnPush || len(f.Items) != 1 || f.Items[0].Queue != "flat" || f.Items[0].TransactionID != "f1" || string(f.Items[0].Payload) != `"x"` {
		t.Fatalf("flat push: %+v", f)
	}
	if b := req.Ops[3].Ack; b.Offset != 7 || b.ConsumerGroup != "g" || b.Status != queen.AckFailed || b.Error != "boom" || b.LeaseID == nil || b.LeaseID.String() != lease {
		t.Fatalf("ack by offset: %+v", b)
	}
	if e := req.Ops[4]; e.Type != queen.TxnPush || e.Items == nil || len(e.Items) != 0 {
		t.Fatalf("empty push: %+v", e)
	}
	if len(req.RequiredLeases) != 1 || req.RequiredLeases[0].String() != lease {
		t.Fatalf("required leases (empty, null and repeats skipped): %v", req.RequiredLeases)
	}

	// requiredLeases absent or null.
	for _, b := range []string{`{"operations":[{"type":"push","items":[]}]}`, `{"operations":[{"type":"push","items":[]}],"requiredLeases":null}`} {
		req, err := DecodeTransaction([]byte(b), 0)
		if err != nil || req.RequiredLeases != nil {
			t.Fatalf("%s: %+v %v", b, req, err)
		}
	}
}

func TestDecodeTransactionErrors(t *testing.T) {
	pid := uuid.NewString()
	many := `{"operations":[{"type":"push","items":[` + strings.Repeat(`{"queue":"q"},`, 6000) + `{"queue":"q"}]},{"type":"push","items":[` + strings.Repeat(`{"queue":"q"},`, 4000) + `{"queue":"q"}]}]}`
	cases := []struct {
		name, body string
		want       *queen.Error
		index      int
		field      string
	}{
		{"not json", `{"operations":`, queen.ErrInvalidJSON, -1, ""},
		{"not an object", `[1]`, queen.ErrInvalidJSON, -1, ""},
		{"no operations", `{}`, queen.ErrMissingField, -1, "operations"},
		{"operations not an array", `{"operations":{}}`, queen.ErrInvalidField, -1, ""},
		{"empty operations", `{"operations":[]}`, queen.ErrInvalidField, -1, "operations"},
		{"operation not an object", `{"operations":[1]}`, queen.ErrInvalidField, 0, "operations[0]"},
		{"no type", `{"operations":[{"items":[]}]}`, queen.ErrMissingField, 0, "operations[0].type"},
		{"type not a string", `{"operations":[{"type":1}]}`, queen.ErrInvalidField, 0, "operations[0].type"},
		{"unknown type", `{"operations":[{"type":"push","items":[]},{"type":"pop"}]}`, queen.ErrInvalidField, 1, "operations[1].type"},
		{"item without queue", `{"operations":[{"type":"push","items":[{"queue":"q"},{"payload":1}]}]}`, queen.ErrMissingField, 0, "operations[0].items[1].queue"},
		{"bad item field", `{"operations":[{"type":"ack","partitionId":"` + pid + `","offset":0},{"type":"push","items":[{"queue":"q","transactionId":5}]}]}`, queen.ErrInvalidField, 1, "operations[1].items[0].transactionId"},
		{"control character", `{"operations":[{"type":"push","items":[{"queue":"q\u0001"}]}]}`, queen.ErrControlChar, 0, "operations[0].items[0].queue"},
		{"flat push without queue", `{"operations":[{"type":"push","payload":1}]}`, queen.ErrMissingField, 0, "operations[0].queue"},
		{"items not an array", `{"operations":[{"type":"push","items":{}}]}`, queen.ErrInvalidJSON, 0, "operations[0].items"},
		{"ack without partition", `{"operations":[{"type":"ack","transactionId":"m"}]}`, queen.ErrMissingField, 0, "operations[0].partitionId"},
		{"ack bad status", `{"operations":[{"type":"ack","transactionId":"m","partitionId":"` + pid + `","status":"maybe"}]}`, queen.ErrInvalidField, 0, "operations[0].status"},
		{"ack wrong type", `{"operations":[{"type":"ack","transactionId":"m","partitionId":"` + pid + `","offset":"x"}]}`, queen.ErrInvalidField, 0, "operations[0].offset"},
		{"bad lease", `{"operations":[{"type":"push","items":[]}],"requiredLeases":["nope"]}`, queen.ErrInvalidField, -1, "requiredLeases[0]"},
		{"too many", many, queen.ErrTooManyItems, -1, "operations"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := DecodeTransaction([]byte(c.body), 0)
			wantErr(t, err, c.want, c.index, c.field)
		})
	}
	// Invalid UTF-8 anywhere and payloads over the limit are refused too.
	_, err := DecodeTransaction([]byte("{\"operations\":[{\"type\":\"push\",\"items\":[{\"queue\":\"q\",\"payload\":\"\xff\"}]}]}"), 0)
	wantErr(t, err, queen.ErrInvalidUTF8, -1, "")
	_, err = DecodeTransaction([]byte(`{"operations":[{"type":"push","items":[{"queue":"q","payload":"`+strings.Repeat("x", 100)+`"}]}]}`), 50)
	wantErr(t, err, queen.ErrPayloadTooLarge, 0, "operations[0].items[0].payload")
}

func TestTxnReplyJSON(t *testing.T) {
	mid := uuid.New()
	pid := uuid.New()
	off := int64(3)
	ops := []queen.TxnOp{
		{Type: queen.TxnPush, Items: []queen.Item{{Queue: "q", Partition: "p", TransactionID: "x"}}},
		{Type: queen.TxnAck, Ack: queen.AckItem{TransactionID: "m1", PartitionID: pid}},
		{Type: queen.TxnPush, Items: []queen.Item{}},
	}
	res := []queen.TxnOpResult{
		{Push: []queen.Result{{Verdict: queen.Queued, MessageID: mid, PartitionID: pid, Offset: 0}}},
		{Ack: queen.AckResult{Success: true, Result: queen.Acked, TransactionID: "m1", PartitionID: pid.String(), Offset: &off, Cursor: &off}},
		{Push: []queen.Result{}},
	}
	b, err := json.Marshal(TxnReply{Success: true, Results: TxnOpReplies(ops, res)})
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	rs := got["results"].([]any)
	push := rs[0].(map[string]any)
	if got["success"] != true || push["type"] != "push" || push["success"] != true || push["index"] != 0.0 {
		t.Fatalf("reply %s", b)
	}
	item := push["items"].([]any)[0].(map[string]any)
	if item["message_id"] != mid.String() || item["status"] != "queued" || item["queueName"] != "q" || item["partition_id"] != pid.String() {
		t.Fatalf("push item %v", item)
	}
	ack := rs[1].(map[string]any)
	if _, ok := ack["items"]; ok || ack["type"] != "ack" || ack["result"] != "acked" || ack["offset"] != 3.0 || ack["index"] != 1.0 {
		t.Fatalf("ack %v", ack)
	}
	if items, ok := rs[2].(map[string]any)["items"].([]any); !ok || len(items) != 0 {
		t.Fatalf("an empty push has \"items\":[]: %s", b)
	}
	// The union type decodes both.
	var back TxnReply
	if err := json.Unmarshal(b, &back); err != nil || len(back.Results[0].Items) != 1 || back.Results[1].Result != queen.Acked {
		t.Fatalf("decode %s: %+v %v", b, back, err)
	}
}

// TestTxnAbortRendersConflicts: each kind of transaction conflict as the
// wire writes it (SPEC.md §5): the field path, the sentence, the index and
// the culprit's names and ids.
func TestTxnAbortRendersConflicts(t *testing.T) {
	pid := uuid.MustParse("0192f0c4-0000-7000-8000-0000000000aa")
	orig := uuid.MustParse("0192f0c4-0000-7000-8000-0000000000bb")
	lease := uuid.MustParse("0192f0c4-0000-7000-8000-0000000000cc")
	ptr := func(n int) *int { return &n }
	for _, tc := range []struct {
		name string
		c    queen.TxnConflict
		want TxnErrorReply
		is   *queen.Error
	}{{
		name: "duplicate of a stored message",
		c: queen.TxnConflict{Kind: queen.TxnDuplicate, Op: 1, Item: 1, Queue: "out", Partition: "o", PartitionID: pid, TransactionID: "x",
			Original: orig, OriginalOffset: 0, WindowSeconds: 3600},
		want: TxnErrorReply{Code: "duplicate", Index: ptr(1), Item: ptr(1), Field: "operations[1].items[1].transactionId",
			Message: `operations[1].items[1]: transactionId "x" is already in partition "o" of queue "out" (message ` + orig.String() +
				` at offset 0, inside the 3600 s window); the transaction was rolled back`,
			Queue: "out", Partition: "o", PartitionID: pid.String(), TransactionID: "x", MessageID: orig.String()},
		is: queen.ErrDuplicate,
	}, {
		name: "repeat inside the transaction",
		c:    queen.TxnConflict{Kind: queen.TxnRepeat, Op: 0, Item: 2, Queue: "q", Partition: "p", PartitionID: pid, TransactionID: "z", EarlierOp: 0, EarlierItem: 1},
		want: TxnErrorReply{Code: "duplicate", Index: ptr(0), Item: ptr(2), Field: "operations[0].items[2].transactionId",
			Message: `operations[0].items[2]: transactionId "z" repeats operations[0].items[1] of the same transaction in partition "p" of queue "q"; the transaction was rolled back`,
			Queue:   "q", Partition: "p", PartitionID: pid.String(), TransactionID: "z"},
		is: queen.ErrDuplicate,
	}, {
		name: "ack by transactionId that does not resolve",
		c:    queen.TxnConflict{Kind: queen.TxnUnresolvable, Op: 1, PartitionID: pid, TransactionID: "never", Detail: "not in the sidecar"},
		want: TxnErrorReply{Code: "unresolvable", Index: ptr(1), Field: "operations[1].transactionId",
			Message: "operations[1]: not in the sidecar; the transaction was rolled back", PartitionID: pid.String(), TransactionID: "never"},
		is: queen.ErrUnresolvable,
	}, {
		name: "ack by offset that does not resolve",
		c:    queen.TxnConflict{Kind: queen.TxnUnresolvable, Op: 3, PartitionID: pid, ByOffset: true, Detail: "offset 99 was never allocated"},
		want: TxnErrorReply{Code: "unresolvable", Index: ptr(3), Field: "operations[3].offset",
			Message: "operations[3]: offset 99 was never allocated; the transaction was rolled back", PartitionID: pid.String()},
		is: queen.ErrUnresolvable,
	}, {
		name: "ack with a lease that is not live",
		c:    queen.TxnConflict{Kind: queen.TxnLeaseInvalid, Op: 2, PartitionID: pid, TransactionID: "m1", Detail: "lease is not the live lease", LeaseID: &lease},
		want: TxnErrorReply{Code: "lease_invalid", Index: ptr(2), Field: "operations[2].leaseId",
			Message: "operations[2]: lease is not the live lease; the transaction was rolled back", PartitionID: pid.String(), TransactionID: "m1", LeaseID: lease.String()},
		is: queen.ErrLeaseInvalid,
	}, {
		name: "a required lease that is not live",
		c:    queen.TxnConflict{Kind: queen.TxnRequiredLease, Op: 1, LeaseID: &lease},
		want: TxnErrorReply{Code: "lease_invalid", Field: "requiredLeases[1]",
			Message: "requiredLeases[1]: lease " + lease.String() + " is not live (expired, released or unknown); the transaction was rolled back", LeaseID: lease.String()},
		is: queen.ErrLeaseInvalid,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.c
			require.ErrorIs(t, &c, tc.is, "the conflict matches its registry error")
			ab := NewTxnAbort(&c)
			require.Equal(t, tc.want, ab.TxnErrorReply)
			require.ErrorIs(t, ab, tc.is)
			e := queen.AsError(ab)
			require.Equal(t, 409, e.Status)
			require.Equal(t, tc.want.Field, e.Field)
			require.Equal(t, tc.want.Index, e.Index)
		})
	}
}

func TestTxnAbort(t *testing.T) {
	a := newTxnAbort(queen.ErrDuplicate, 2, "operations[2].items[0].transactionId", "operations[2].items[0]: transactionId \"x\" is a duplicate")
	a.Queue, a.Partition, a.TransactionID = "q", "p", "x"
	var err error = a
	if !errors.Is(err, queen.ErrDuplicate) || errors.Is(err, queen.ErrUnresolvable) {
		t.Fatal("errors.Is by code")
	}
	e := queen.AsError(err)
	if e.Status != 409 || e.Code != "duplicate" || *e.Index != 2 || e.Field != a.Field || e.Message != a.Message {
		t.Fatalf("registry error %+v", e)
	}
	b, _ := json.Marshal(a)
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]any{"success": false, "code": "duplicate", "index": 2.0, "retryable": false,
		"queue": "q", "partition": "p", "transactionId": "x", "error": a.Message, "field": a.Field} {
		if got[k] != v {
			t.Fatalf("%s = %v, want %v in %s", k, got[k], v, b)
		}
	}
	if _, ok := got["Err"]; ok {
		t.Fatalf("the registry error leaked into the body: %s", b)
	}
	if n := newTxnAbort(queen.ErrLeaseInvalid, -1, "requiredLeases[0]", "lease"); n.Index != nil || n.Err.Index != nil {
		t.Fatal("no operation, no index")
	}
}
