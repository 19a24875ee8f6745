package queen

import (
	"encoding/json"
	"errors"
	"testing"
)

func TestTxnAbort(t *testing.T) {
	a := NewTxnAbort(ErrDuplicate, 2, "operations[2].items[0].transactionId", "operations[2].items[0]: transactionId \"x\" is a duplicate")
	a.Queue, a.Partition, a.TransactionID = "q", "p", "x"
	var err error = a
	if !errors.Is(err, ErrDuplicate) || errors.Is(err, ErrUnresolvable) {
		t.Fatal("errors.Is by code")
	}
	e := AsError(err)
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
	if n := NewTxnAbort(ErrLeaseInvalid, -1, "requiredLeases[0]", "lease"); n.Index != nil || n.Err.Index != nil {
		t.Fatal("no operation, no index")
	}
}
