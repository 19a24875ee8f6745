package client

import (
	"encoding/json"
	"testing"
)

// AppendPushRequest writes what encoding/json writes for the same items.
func TestAppendPushRequestMatchesEncodingJSON(t *testing.T) {
	items := []PushItem{
		{Queue: "orders", Partition: "o-1", TransactionID: "order:1:v1", TraceID: "t", Payload: json.RawMessage(`{"n":1}`)},
		{Queue: "q \"x\" \\ 日本 \x01"},
		{Queue: "q", Payload: json.RawMessage(`[1,"a"]`)},
	}
	fast := AppendPushRequest(nil, items)
	std, err := json.Marshal(struct {
		Items []PushItem `json:"items"`
	}{items})
	if err != nil {
		t.Fatal(err)
	}
	var a, b any
	if err := json.Unmarshal(fast, &a); err != nil {
		t.Fatalf("invalid JSON %s: %v", fast, err)
	}
	if err := json.Unmarshal(std, &b); err != nil {
		t.Fatal(err)
	}
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	if string(ja) != string(jb) {
		t.Fatalf("fast %s\nstd  %s", fast, std)
	}
}
