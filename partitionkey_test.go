package queen

import (
	"fmt"
	"strings"
	"testing"

	"github.com/zeebo/xxh3"
)

// ShardOf is SPEC.md §9's formula, XXH3-64 of queue + "\x1f" + partition
// modulo the count, with the empty partition read as Default, for short and
// long keys (past the stack buffer); PartitionHash128 is the XXH3-128 of
// the same key.
func TestShardOfIsTheContractsFormula(t *testing.T) {
	long := strings.Repeat("é", 120)
	for _, count := range []int{1, 7, 64, 1000} {
		for i := 0; i < 500; i++ {
			q, p := fmt.Sprintf("q%d", i%7), fmt.Sprintf("p-%d", i)
			if i%50 == 0 {
				q, p = long, long+p
			}
			want := int(xxh3.HashString(q+"\x1f"+p) % uint64(count))
			if got := ShardOf(q, p, count); got != want {
				t.Fatalf("ShardOf(%q, %q, %d) = %d, the contract's is %d", q, p, count, got, want)
			}
			if got, want := PartitionHash128(q, p), xxh3.HashString128(q+"\x1f"+p); got != want {
				t.Fatalf("PartitionHash128(%q, %q) = %v, want %v", q, p, got, want)
			}
		}
		if ShardOf("q", "", count) != ShardOf("q", DefaultPartition, count) {
			t.Fatal("the empty partition is not Default")
		}
	}
}

// The separator keeps ("ab","c") and ("a","bc") apart, and 1000 partitions
// reach every one of 64 shards.
func TestShardOfIsStableAndSpread(t *testing.T) {
	if PartitionHash("ab", "c") == PartitionHash("a", "bc") {
		t.Fatal("the separator does not separate")
	}
	seen := map[int]bool{}
	for i := 0; i < 1000; i++ {
		n := ShardOf("q", fmt.Sprintf("p%d", i), 64)
		if n < 0 || n >= 64 || n != ShardOf("q", fmt.Sprintf("p%d", i), 64) {
			t.Fatalf("shard %d", n)
		}
		seen[n] = true
	}
	if len(seen) != 64 {
		t.Fatalf("1000 partitions reach %d of 64 shards", len(seen))
	}
}

func BenchmarkShardOf(b *testing.B) {
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		ShardOf("orders", "customer-1234567", 64)
	}
}
