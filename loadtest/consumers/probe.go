package consumers

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/loadtest/report"
	"github.com/queen-mq/queen-go/loadtest/target"
	"github.com/queen-mq/queen-go/transport/client"
)

const (
	// probePark is how long a probe round lets its long poll park before
	// pushing.
	probePark = 20 * time.Millisecond
	// probeWait is the probe's long-poll timeout.
	probeWait = 10 * time.Second
)

// wakeProbe runs rounds rounds on queue: start a long poll (wait, timeout
// 10 s), give it 20 ms to park, push one message, and record (reply
// received − the message's createdAt); then ack it. A warm-up message,
// pushed and consumed first, creates the queue and its partition. It stops
// early when ctx ends.
func wakeProbe(ctx context.Context, cl target.ConsumeClient, snd target.Sender, queue string, rounds int) *report.WakeReport {
	w := &report.WakeReport{Queue: queue, Rounds: rounds}
	pb := &prober{cl: cl, snd: snd, queue: queue, w: w}
	if err := pb.push(ctx, "probe-warm-up"); err != nil {
		w.LastError = "push: " + err.Error()
	}
	pb.drain(ctx)
	var lat []time.Duration
	for i := 1; i <= rounds && ctx.Err() == nil; i++ {
		type popped struct {
			res queen.PopResult
			at  time.Time
			err error
		}
		ch := make(chan popped, 1)
		go func() {
			res, err := cl.Pop(ctx, target.PopReq{Queue: queue, Group: queen.DefaultConsumerGroup, Batch: 1, Wait: probeWait})
			ch <- popped{res, time.Now(), err}
		}()
		if !sleep(ctx, probePark) {
			<-ch
			break
		}
		txn := fmt.Sprintf("probe-%d", i)
		err := pb.push(ctx, txn)
		p := <-ch
		ok := false
		switch {
		case err != nil:
			w.LastError = "push: " + err.Error()
		case p.err != nil:
			w.LastError = "pop: " + p.err.Error()
		case len(p.res.Messages) != 1 || p.res.Messages[0].TransactionID != txn:
			w.LastError = fmt.Sprintf("the long poll answered %d messages, want %s", len(p.res.Messages), txn)
		default:
			ok = true
			lat = append(lat, p.at.Sub(p.res.Messages[0].CreatedAt))
		}
		pb.ack(ctx, p.res.Messages)
		if !ok {
			w.Misses++
			pb.drain(ctx)
		}
	}
	w.Samples = len(lat)
	w.Latency = report.LatencyOf(lat)
	return w
}

type prober struct {
	cl    target.ConsumeClient
	snd   target.Sender
	queue string
	w     *report.WakeReport
}

// push pushes one message with transactionId txn.
func (pb *prober) push(ctx context.Context, txn string) error {
	items := []client.PushItem{{Queue: pb.queue, Partition: "Default", TransactionID: txn, Payload: json.RawMessage(`{"probe":true}`)}}
	out := make([]target.Result, 1)
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := pb.snd.Send(pctx, items, out); err != nil {
		return err
	}
	if out[0].Status != queen.Queued {
		return fmt.Errorf("push of %s answered %s (%s)", txn, out[0].Status, out[0].Code)
	}
	return nil
}

// ack acks msgs completed.
func (pb *prober) ack(ctx context.Context, msgs []queen.Message) {
	if len(msgs) == 0 {
		return
	}
	acks := make([]client.Ack, len(msgs))
	for j, m := range msgs {
		acks[j] = client.AckFor(m)
	}
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if _, err := pb.cl.Ack(actx, queen.DefaultConsumerGroup, acks); err != nil {
		pb.w.LastError = "ack: " + err.Error()
	}
}

// drain pops and acks whatever the probe queue holds (a warm-up message,
// or a round's message its long poll missed), so the next round starts
// empty.
func (pb *prober) drain(ctx context.Context) {
	for range 20 {
		res, err := pb.cl.Pop(ctx, target.PopReq{Queue: pb.queue, Group: queen.DefaultConsumerGroup, Batch: 100, Wait: 200 * time.Millisecond})
		if err != nil || len(res.Messages) == 0 {
			return
		}
		pb.ack(ctx, res.Messages)
	}
}
