// Package client is the Go client of a Queen broker (SPEC.md §3–§6, §9,
// §11, §13), over NATS or the HTTP gateway behind one Transport:
//
//	nc, _ := client.ConnectNATS("nats://127.0.0.1:4222", "my-app")
//	c := client.NewNATS(nc)                                                     // or client.NewHTTP(client.HTTPConfig{URLs: ...})
//	replies, err := c.Push(ctx, []client.PushItem{{Queue: "orders", TransactionID: "order:1:v1"}})
//
// Client gives the sync push (shard-aware over NATS with ShardAware),
// pop, ack, Consume, lease extension, transactions (Client.Transaction) and
// the operator calls (queues, dedup inspector, DLQ list and replay, peek,
// queue detail, cluster view, /health, /metrics); Producer is the async,
// idempotent producer over it. Every refusal is decoded in one place
// (Reply.Err, wire.DecodeError) into a *queen.Error; a request no broker
// answered is a *NoAnswerError. Items, names and acks are checked first with
// the broker's own rule (package queen), so what the client refuses is what
// a broker would refuse, with the same code, and nothing is sent.
//
// It is the client side only: it imports the shared kernel (package queen:
// ShardOf, the text rules) and transport/wire (subjects, shapes), never the
// broker's packages (transport, shards, actors, persistence) nor pgx.
package client
