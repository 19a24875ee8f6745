// Package shards maps partitions to shards (SPEC.md §9) and routes push
// requests to them: the Router splits a request's items by partition, sends
// each shard's group to that shard's NATS subject (queen.v1.shard.<n>.push),
// and reassembles the verdicts in request order; the Server answers a shard's
// subject by handing each partition's items to a PartitionPusher (the
// partition actors). It knows neither SQL nor HTTP.
package shards
