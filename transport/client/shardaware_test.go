package client

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/transport/wire"
)

// The shard subjects take a client's push as the public push body when it
// carries the header Content-Type: application/json (SPEC.md §9, §11); the
// shard itself is queen.ShardOf, the brokers' and the client's one function.
func TestShardPushSubject(t *testing.T) {
	for n, want := range map[int]string{0: "queen.v1.shard.0.push", 63: "queen.v1.shard.63.push"} {
		if got := wire.ShardPushSubject(n); got != want {
			t.Fatalf("subject %s, want %s", got, want)
		}
	}
	if wire.ContentTypeJSON != "application/json" {
		t.Fatalf("the client sends %q", wire.ContentTypeJSON)
	}
}

// vouch never accepts an item the broker would refuse for the reasons it
// checks; such pushes go whole to queen.v1.push.
func TestVouch(t *testing.T) {
	ok := PushItem{Queue: "q", Partition: "p", TransactionID: "t", TraceID: "tr", Payload: json.RawMessage(`{"a":"\u00e9 \ud83d\ude00"}`)}
	if !vouch(&ok) {
		t.Fatal("a plain item is not vouched for")
	}
	for name, mod := range map[string]func(*PushItem){
		"no queue":          func(it *PushItem) { it.Queue = "" },
		"long partition":    func(it *PushItem) { it.Partition = strings.Repeat("p", 256) },
		"control character": func(it *PushItem) { it.TransactionID = "a\tb" },
		"bad UTF-8":         func(it *PushItem) { it.Queue = "q\xff" },
		"bad trace":         func(it *PushItem) { it.TraceID = "\xff" },
		"C1 control":        func(it *PushItem) { it.TransactionID = "a\u0085" },
		"BOM in partition":  func(it *PushItem) { it.Partition = "\ufeffp" },
		"long transaction":  func(it *PushItem) { it.TransactionID = strings.Repeat("t", 1025) },
		"payload not JSON":  func(it *PushItem) { it.Payload = json.RawMessage(`{`) },
		"surrogate escape":  func(it *PushItem) { it.Payload = json.RawMessage(`"\ud800"`) },
		"large payload":     func(it *PushItem) { it.Payload = json.RawMessage(`"` + strings.Repeat("x", 4<<20) + `"`) },
	} {
		it := ok
		mod(&it)
		if vouch(&it) {
			t.Errorf("%s: vouched for", name)
		}
	}
}

// A shard group's refusal names the item by its place in the whole push.
func TestRefusalNamesTheRequestIndex(t *testing.T) {
	e := queen.ErrInvalidJSON.With("items[1].payload is not JSON").At(1, "items[1].payload")
	err := refusal(e, []int{3, 8, 9})
	var got *queen.Error
	if !errors.As(err, &got) || got.Index == nil || *got.Index != 8 || got.Field != "items[8].payload" || got.Message != "items[8].payload is not JSON" {
		t.Fatalf("refusal: %+v", got)
	}
	if *e.Index != 1 {
		t.Fatal("the group's error was changed")
	}
}
