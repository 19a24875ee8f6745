package actors

import (
	"sync/atomic"
)

// Worker pool sizes of the host's dispatcher.
const (
	// maxIdleWorkers is how many worker goroutines may wait for a mailbox
	// run (an idle worker's stack is a few KiB: GC shrinks it). A burst
	// wider than that starts goroutines, as protoactor's default
	// dispatcher does for every run.
	maxIdleWorkers = 256
	// mailboxThroughput is the messages a mailbox run handles before it
	// yields the processor (protoactor's default).
	mailboxThroughput = 300
)

// workers is the dispatcher of the host's actors (protoactor's
// actor.Dispatcher): it hands a mailbox run to a worker goroutine that
// waits for one, or starts a goroutine for it when none waits; after a
// run, a goroutine waits for the next one while fewer than maxIdle wait,
// and returns otherwise.
//
// protoactor's default dispatcher starts a goroutine for each mailbox run.
// Spread thin over many partitions, a partition actor's mailbox run is one
// push (issue 42), and each run's new goroutine grew its stack again
// (runtime.copystack was 12 % of BenchmarkPushSpread's CPU at 10,000
// partitions). A worker keeps its grown stack from run to run.
//
// Schedule never waits: a run that blocks holds its worker only, as it
// held its goroutine before, so the pool adds no way to deadlock (a run
// never waits for a worker, so no run waits for another to finish). After stop,
// waiting workers return and a run scheduled later still runs, on a
// goroutine that then returns.
type workers struct {
	work chan func() // unbuffered: a send succeeds only to a waiting worker
	done chan struct{}
	// idle counts the workers waiting, or about to (a worker counts
	// itself before it waits, and stops counting just after it is handed
	// a run): at most maxIdle wait, and a run scheduled in the moment
	// before a worker waits starts a goroutine, which is harmless.
	idle       atomic.Int32
	maxIdle    int32
	throughput int
	// started and alive count the goroutines started and not yet
	// returned (for the tests).
	started, alive atomic.Int64
}

func newWorkers(maxIdle, throughput int) *workers {
	return &workers{work: make(chan func()), done: make(chan struct{}), maxIdle: int32(maxIdle), throughput: throughput}
}

// Schedule runs fn on a waiting worker or on a new goroutine.
func (w *workers) Schedule(fn func()) {
	select {
	case w.work <- fn:
	default:
		w.started.Add(1)
		w.alive.Add(1)
		go w.run(fn)
	}
}

// Throughput is the messages a mailbox run handles before it yields.
func (w *workers) Throughput() int { return w.throughput }

func (w *workers) run(fn func()) {
	defer w.alive.Add(-1)
	for {
		fn()
		if w.idle.Add(1) > w.maxIdle {
			w.idle.Add(-1)
			return
		}
		select {
		case fn = <-w.work:
			w.idle.Add(-1)
		case <-w.done:
			w.idle.Add(-1)
			return
		}
	}
}

// stop makes the waiting workers return, and every worker return after its
// current run. Call it once, after the actor system is shut down.
func (w *workers) stop() { close(w.done) }
