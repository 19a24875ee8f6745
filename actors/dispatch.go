package actors

import (
	"runtime"
	"sync"

	"github.com/asynkron/protoactor-go/actor"
)

// mailboxThroughput is how many messages a mailbox run takes before it
// yields (protoactor's default).
const mailboxThroughput = 300

// workers runs the partition actors' mailboxes on a fixed set of long-lived
// goroutines instead of protoactor's default, a new goroutine per mailbox
// run. Spread thin, a partition's mailbox runs once per push it gets (issue
// 42): a new goroutine each time started on a small stack and grew it in
// the actor's first append, about 7 % of the broker's CPU at 10,000
// partitions. A worker's stack grows once and stays grown.
//
// Runs wait in a bounded queue; when it is full, a run gets a new goroutine
// as before, so Schedule never blocks. Only partition actors use it: their
// Receive never blocks (it answers on buffered channels and sends), so
// every queued run starts. The parent, which waits for its children when it
// stops, keeps protoactor's default. The workers are shared by every Host
// of the process and live as long as it; parked, they cost their stacks.
type workers struct {
	queue chan func()
}

// dispatcher returns the process's worker pool, starting it on first use
// with four workers per GOMAXPROCS and room for 256 runs per worker.
var dispatcher = sync.OnceValue(func() actor.Dispatcher {
	n := 4 * runtime.GOMAXPROCS(0)
	return newWorkers(n, 256*n)
})

// newWorkers starts n workers sharing a queue of depth runs.
func newWorkers(n, depth int) *workers {
	w := &workers{queue: make(chan func(), depth)}
	for range n {
		go w.loop()
	}
	return w
}

func (w *workers) loop() {
	for fn := range w.queue {
		fn()
	}
}

// Schedule queues fn (a mailbox run) for a worker, or runs it on a new
// goroutine when the queue is full.
func (w *workers) Schedule(fn func()) {
	select {
	case w.queue <- fn:
	default:
		go fn()
	}
}

// Throughput is the messages a mailbox run takes before it yields.
func (w *workers) Throughput() int { return mailboxThroughput }
