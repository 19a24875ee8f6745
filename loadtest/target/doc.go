// Package target is how the load harness's clients reach a broker: the
// producers' senders (Sender: NATS with ConnectSpread over a cluster's
// servers, HTTP with failover over several brokers, raw COPY for the
// baseline; AsyncPush for the async producers) and the consumers' client
// (ConsumeClient: pop, ack, configure; ConfigureQueue), and the brokers' /metrics the
// timeline and the consume report read (ScrapeMetrics), all through
// transport/client, with errors as *queen.Error. It imports no other
// harness package.
package target
