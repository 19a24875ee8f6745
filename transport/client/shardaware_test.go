package transport

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/shards"
)

// The client's shard mapping and subjects are the brokers' (SPEC.md §9).
func TestShardOfMatchesTheBrokers(t *testing.T) {
	long := strings.Repeat("é", 120)
	for _, count := range []int{1, 7, 64, 1000} {
		for i := 0; i < 500; i++ {
			q, p := fmt.Sprintf("q%d", i%7), fmt.Sprintf("p-%d", i)
			if i%50 == 0 {
				q, p = long, long+p
			}
			if got, want := ShardOf(q, p, count), shards.Of(q, p, count); got != want {
				t.Fatalf("ShardOf(%q, %q, %d) = %d, the brokers' is %d", q, p, count, got, want)
			}
		}
		if got, want := ShardOf("q", "", count), shards.Of("q", queen.DefaultPartition, count); got != want {
			t.Fatalf("the empty partition maps to %d, Default to %d", got, want)
		}
	}
	for _, n := range []int{0, 5, 63} {
		if ShardPushSubject(n) != shards.PushSubject(n) {
			t.Fatalf("subject %s, the brokers' is %s", ShardPushSubject(n), shards.PushSubject(n))
		}
	}
	if shards.ContentTypeJSON != "application/json" {
		t.Fatalf("the shard subjects take client pushes as %q; the client sends application/json", shards.ContentTypeJSON)
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
