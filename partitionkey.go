package queen

import "github.com/zeebo/xxh3"

// PartitionKey names a partition: its queue and its name.
type PartitionKey struct {
	Queue, Partition string
}

// partitionKeySep separates the queue and the partition in a partition key
// (SPEC.md §9: queue + "\x1f" + partition).
const partitionKeySep = 0x1f

// appendPartitionKey appends the partition key of (queue, partition) to dst:
// queue + "\x1f" + partition, the empty partition read as DefaultPartition
// (SPEC.md §1, §9).
func appendPartitionKey(dst []byte, queue, partition string) []byte {
	if partition == "" {
		partition = DefaultPartition
	}
	return append(append(append(dst, queue...), partitionKeySep), partition...)
}

// PartitionHash is the XXH3-64 of the partition key queue + "\x1f" +
// partition (SPEC.md §9), the empty partition read as DefaultPartition
// (SPEC.md §1). ShardOf takes it modulo the shard count; the broker's
// partition actors key their tables by it.
func PartitionHash(queue, partition string) uint64 {
	var a [256]byte
	return xxh3.Hash(appendPartitionKey(a[:0], queue, partition))
}

// PartitionHash128 is the XXH3-128 of the same partition key as
// PartitionHash: two partitions share it with a probability of about 2^-128
// per pair, the bar the dedup holds transaction ids to (SPEC.md §8).
func PartitionHash128(queue, partition string) xxh3.Uint128 {
	var a [256]byte
	return xxh3.Hash128(appendPartitionKey(a[:0], queue, partition))
}

// ShardOf returns the shard of partition (queue, partition) among count
// shards: PartitionHash modulo count, in [0, count) (SPEC.md §9). The
// brokers (package shards) and the Go client (package transport/client)
// both compute it here, so a shard-aware client sends a partition's items to
// the subject of the broker that owns it. count must be positive.
func ShardOf(queue, partition string, count int) int {
	return int(PartitionHash(queue, partition) % uint64(count))
}
