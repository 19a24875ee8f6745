package actors

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/queen-mq/queen-go/internal/storetest"
)

func TestWorkersRunEachRunOnceAndReuseWaitingWorkers(t *testing.T) {
	w := newWorkers(4, mailboxThroughput)
	defer w.stop()
	// One run at a time: after the first, a run goes to the worker that
	// waits, so one goroutine runs nearly all of them (a run scheduled
	// just as the worker counts itself idle, before it waits, starts a
	// goroutine: rare, and harmless).
	for range 100 {
		var ran atomic.Bool
		w.Schedule(func() { ran.Store(true) })
		waitFor(t, ran.Load)
		waitFor(t, func() bool { return w.idle.Load() >= 1 })
	}
	require.Less(t, w.started.Load(), int64(50), "sequential runs reuse the waiting worker")
	// Many at once: every run runs exactly once.
	var n atomic.Int64
	for range 1000 {
		go w.Schedule(func() { n.Add(1) })
	}
	waitFor(t, func() bool { return n.Load() >= 1000 })
	waitFor(t, func() bool { return w.alive.Load() <= 4 })
	require.EqualValues(t, 1000, n.Load(), "each run ran once")
}

func TestWorkersNeverWaitForABlockedRun(t *testing.T) {
	w := newWorkers(1, mailboxThroughput)
	defer w.stop()
	// Every run blocks until the last one runs: the pool must give each
	// its own goroutine rather than wait for a worker (a run that waits on
	// another actor would otherwise deadlock).
	const n = 50
	release := make(chan struct{})
	var blocked sync.WaitGroup
	blocked.Add(n)
	for range n {
		w.Schedule(func() { blocked.Done(); <-release })
	}
	blocked.Wait()
	w.Schedule(func() { close(release) })
	// Past the idle cap, the workers return: one stays.
	waitFor(t, func() bool { return w.alive.Load() == 1 })
	require.EqualValues(t, n+1, w.started.Load())
}

func TestWorkersReturnOnStop(t *testing.T) {
	w := newWorkers(8, mailboxThroughput)
	var runs sync.WaitGroup
	release := make(chan struct{})
	for range 8 {
		runs.Add(1)
		w.Schedule(func() { <-release; runs.Done() })
	}
	close(release)
	runs.Wait()
	waitFor(t, func() bool { return w.idle.Load() == 8 })
	w.stop()
	waitFor(t, func() bool { return w.alive.Load() == 0 })
	// A run scheduled after stop still runs, and its goroutine returns.
	var ran atomic.Bool
	w.Schedule(func() { ran.Store(true) })
	waitFor(t, ran.Load)
	waitFor(t, func() bool { return w.alive.Load() == 0 })
}

func TestHostStopLeavesNoWorkers(t *testing.T) {
	h := startHost(t, Config{Store: storetest.NewMem(), Logger: quiet()})
	pushOne(t, h, "p0")
	pushOne(t, h, "p1")
	w := h.workers
	require.Positive(t, w.started.Load(), "the actors ran on the host's workers")
	require.NoError(t, h.Stop(t.Context()))
	waitFor(t, func() bool { return w.alive.Load() == 0 })
}
