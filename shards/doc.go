// Package shards maps partitions to shards (SPEC.md §9) and routes push
// requests to them: the Router splits a request's items by partition, sends
// each shard's group to that shard's NATS subject (queen.v1.shard.<n>.push),
// and reassembles the verdicts in request order; the Server answers a shard's
// subject by handing each partition's items to a PartitionPusher (the
// partition actors). The Membership keeps this broker's fair share of the
// shards through expiring leases in PostgreSQL, serves exactly the shards it
// holds, and tells a cluster Router which shards to send to other brokers;
// the rest, and any shard no broker answers for, are served locally. A
// shard subject also takes a shard-aware client's push (the public push
// body, marked Content-Type: application/json), handed to the broker's
// front door (Server.SetDirect). It knows neither SQL nor HTTP.
package shards
