package actors

import (
	"sync"
	"testing"
	"time"
)

// A full queue never blocks Schedule: the runs that do not fit get
// goroutines of their own, and the queued one runs once a worker frees up.
func TestWorkersScheduleNeverBlocks(t *testing.T) {
	w := &workers{queue: make(chan func(), 1)} // no worker yet
	var wg sync.WaitGroup
	ran := make(chan int, 3)
	for i := range 3 {
		wg.Add(1)
		w.Schedule(func() { defer wg.Done(); ran <- i })
	}
	// Run 0 waits in the queue; 1 and 2 ran on goroutines of their own.
	got := map[int]bool{}
	for range 2 {
		select {
		case i := <-ran:
			got[i] = true
		case <-time.After(10 * time.Second):
			t.Fatalf("runs that did not fit the queue did not run; ran %v", got)
		}
	}
	if got[0] {
		t.Fatalf("the queued run ran with no worker: %v", got)
	}
	go w.loop()
	wg.Wait()
	if i := <-ran; i != 0 {
		t.Fatalf("the worker ran %d, want the queued run 0", i)
	}
	close(w.queue)
}

// Every run scheduled on a pool runs, in any number.
func TestWorkersRunEverything(t *testing.T) {
	w := newWorkers(2, 4)
	defer close(w.queue)
	var wg sync.WaitGroup
	for range 1000 {
		wg.Add(1)
		w.Schedule(wg.Done)
	}
	wg.Wait()
	if got := w.Throughput(); got != mailboxThroughput {
		t.Fatalf("Throughput() = %d, want %d", got, mailboxThroughput)
	}
}
