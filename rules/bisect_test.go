package rules

import (
	"fmt"
	"testing"
	"time"
)

// simulate runs a consumer group over offsets 0..n-1 with the Bisection
// rule and a consumer that handles a whole delivery and acks it at the end,
// crashing (acking nothing, its lease expiring) on any delivery that holds
// a poison offset. A charged poison message is dead-lettered after
// retryLimit+1 charges. It returns the deliveries (first offset and size),
// the dead-lettered offsets with their charges, and the expiries.
func simulate(t *testing.T, n int64, batch int, retryLimit int32, poison ...int64) (deliveries [][2]int64, dead map[int64]int32, expiries int) {
	t.Helper()
	isPoison := map[int64]bool{}
	for _, p := range poison {
		isPoison[p] = true
	}
	var b Bisection
	cursor := int64(-1)
	counts := map[int64]int32{}
	dead = map[int64]int32{}
	now := time.Unix(0, 0)
	for cursor < n-1 {
		if len(deliveries) > 10000 {
			t.Fatalf("no progress: cursor %d, %+v", cursor, b)
		}
		now = now.Add(time.Second)
		limit, _, _ := b.Deliver(cursor, batch, now)
		last := min(cursor+int64(limit), n-1)
		deliveries = append(deliveries, [2]int64{cursor + 1, last - cursor})
		crashed := false
		for o := cursor + 1; o <= last; o++ {
			if isPoison[o] {
				crashed = true
			}
		}
		if !crashed {
			cursor = last
			continue
		}
		expiries++
		charge, bisected := b.Expire(cursor, cursor+1, last, now)
		if charge == bisected {
			t.Fatalf("expiry of %d..%d: charge %v bisected %v", cursor+1, last, charge, bisected)
		}
		if charge {
			off := cursor + 1
			if !isPoison[off] {
				t.Fatalf("innocent message %d charged", off)
			}
			if counts[off]++; counts[off] > retryLimit {
				dead[off] = counts[off]
				cursor = off
				b.Mark = cursor
			}
		}
	}
	return deliveries, dead, expiries
}

// TestBisectionIsolatesThePoison: a batch of 100 with a poison message at
// position 37 (offset 36) and a consumer that acks nothing when it crashes:
// only that message is charged, retryLimit+1 times, found in log2(100)
// bisections; the deliveries grow back once it is passed.
func TestBisectionIsolatesThePoison(t *testing.T) {
	deliveries, dead, expiries := simulate(t, 100, 100, 3, 36)
	if fmt.Sprint(dead) != "map[36:4]" {
		t.Fatalf("dead letters %v, want map[36:4]", dead)
	}
	// 100 -> 50 -> 25 -> 12 -> 6 -> 3 bisected, then 4 single-message expiries.
	if expiries != 6+4 {
		t.Fatalf("%d expiries, want 10: %v", expiries, deliveries)
	}
	want := "[[0 100] [0 50] [0 25] [25 25] [25 12] [25 6] [31 6] [31 3] [34 3] [34 1] [35 1] [36 1] [36 1] [36 1] [36 1] [37 1] [38 2] [40 4] [44 8] [52 16] [68 32]]"
	if got := fmt.Sprint(deliveries); got != want {
		t.Fatalf("deliveries\n got %s\nwant %s", got, want)
	}
}

// Several poison messages in one batch, at its ends, or a batch of one: each
// poison message alone is dead-lettered, each once, and every other message
// is passed by an ack.
func TestBisectionManyPoisons(t *testing.T) {
	for _, c := range []struct {
		n      int64
		batch  int
		poison []int64
	}{
		{100, 100, []int64{0}}, {100, 100, []int64{99}}, {100, 100, []int64{3, 4, 70}},
		{1000, 100, []int64{150, 151, 152, 999}}, {5, 1, []int64{2}}, {2, 2, []int64{0, 1}},
		{300, 37, []int64{36, 37, 38, 200}},
	} {
		_, dead, _ := simulate(t, c.n, c.batch, 2, c.poison...)
		if len(dead) != len(c.poison) {
			t.Errorf("%+v: dead letters %v", c, dead)
		}
		for _, p := range c.poison {
			if dead[p] != 3 {
				t.Errorf("%+v: poison %d dead-lettered after %d charges, want 3", c, p, dead[p])
			}
		}
	}
}

// Deliver outside a bisection is the batch; a cursor at or past To ends it
// and reports the stall from Since.
func TestBisectionDeliver(t *testing.T) {
	var b Bisection
	if limit, stall, changed := b.Deliver(5, 40, time.Now()); limit != 40 || stall != 0 || changed {
		t.Fatalf("inactive: %d %v %v", limit, stall, changed)
	}
	t0 := time.Unix(100, 0)
	if charge, bisected := b.Expire(9, 10, 19, t0); charge || !bisected || b.Size != 5 || b.To != 19 || b.Hot != 19 {
		t.Fatalf("expire 10 messages: %v %v %+v", charge, bisected, b)
	}
	if charge, bisected := b.Expire(9, 12, 11, t0); charge || bisected {
		t.Fatalf("an empty span: %v %v", charge, bisected)
	}
	if limit, _, _ := b.Deliver(9, 40, t0); limit != 5 {
		t.Fatalf("first bisected delivery: %d", limit)
	}
	if limit, _, _ := b.Deliver(14, 40, t0); limit != 5 {
		t.Fatalf("below Hot nothing grows: %d", limit)
	}
	limit, stall, changed := b.Deliver(19, 40, t0.Add(7*time.Second))
	if limit != 40 || stall != 7*time.Second || !changed || b.Active {
		t.Fatalf("passed: %d %v %v %+v", limit, stall, changed, b)
	}
	var one Bisection
	if charge, bisected := one.Expire(3, 4, 4, t0); !charge || bisected || one.Active {
		t.Fatalf("single-message span outside a bisection: %v %v %+v", charge, bisected, one)
	}
}
