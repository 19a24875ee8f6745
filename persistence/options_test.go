package persistence

import (
	"testing"

	"github.com/queen-mq/queen-go"
)

// diffOptions names what a configure changed, by wire name.
func TestDiffOptions(t *testing.T) {
	on := queen.DefaultOptions()
	on.DedupCheckPayload = true
	ch := diffOptions(queen.DefaultOptions(), on)
	if c, ok := ch["dedupCheckPayload"]; !ok || len(ch) != 1 || c.From != false || c.To != true {
		t.Fatalf("Diff: %v", ch)
	}
}
