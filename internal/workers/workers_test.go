package workers

import (
	"sync"
	"testing"

	"github.com/asynkron/protoactor-go/actor"
)

var _ actor.Dispatcher = Dispatcher{}

func TestGoRunsEveryTask(t *testing.T) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	seen := map[int]bool{}
	for i := range 1000 {
		wg.Add(1)
		Go(func() {
			defer wg.Done()
			mu.Lock()
			seen[i] = true
			mu.Unlock()
		})
	}
	wg.Wait()
	if len(seen) != 1000 {
		t.Fatalf("ran %d of 1000 tasks", len(seen))
	}
}

func TestGoRunsTasksConcurrently(t *testing.T) {
	// Two tasks that each wait for the other: they deadlock unless both run
	// at once (the pool is unbounded).
	a, b := make(chan struct{}), make(chan struct{})
	done := make(chan struct{}, 2)
	Go(func() { close(a); <-b; done <- struct{}{} })
	Go(func() { close(b); <-a; done <- struct{}{} })
	<-done
	<-done
}
