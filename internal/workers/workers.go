// Package workers runs short-lived tasks on reused goroutines: a NATS
// request's handler, a partition actor's mailbox run. A fresh goroutine
// starts with a small stack and grows it (by copying) on every task that
// goes deep, as the push path does; a reused one keeps its grown stack.
// The pool is github.com/panjf2000/ants: unbounded (callers bound their own
// concurrency), idle goroutines leave after IdleExpiry.
package workers

import (
	"time"

	"github.com/panjf2000/ants/v2"
)

// IdleExpiry is how long an idle worker goroutine is kept (10s).
const IdleExpiry = 10 * time.Second

var pool = newPool()

func newPool() *ants.Pool {
	p, err := ants.NewPool(-1, ants.WithExpiryDuration(IdleExpiry),
		// A panicking task crashes the process, as it would on its own
		// goroutine (ants would otherwise log it and carry on).
		ants.WithPanicHandler(func(p any) { panic(p) }))
	if err != nil {
		panic("workers: " + err.Error())
	}
	return p
}

// Go runs fn on an idle worker goroutine, or a new one; it never blocks
// for long and never drops fn (were the pool to refuse, fn runs on a
// goroutine of its own).
func Go(fn func()) {
	if pool.Submit(fn) != nil {
		go fn()
	}
}

// Dispatcher is a protoactor dispatcher (actor.Dispatcher) that runs
// mailboxes on worker goroutines, Throughput messages per run (300, as
// protoactor's default dispatcher).
type Dispatcher struct{}

// Schedule runs fn through Go.
func (Dispatcher) Schedule(fn func()) { Go(fn) }

// Throughput is the messages a mailbox processes before it yields: 300.
func (Dispatcher) Throughput() int { return 300 }
