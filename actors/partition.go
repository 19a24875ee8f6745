package actors

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/google/uuid"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/rules"
)

// pushReq is one request's items for one partition, with the channel its
// verdicts go back on (buffered, so an actor never blocks replying).
type pushReq struct {
	host  *Host
	key   partitionKey
	items []*queen.Item
	bytes int64 // payload and id bytes of items, for the byte bounds
	reply chan pushResp
}

// respond answers the request exactly once and releases its share of the
// host's in-flight bound, whether or not anyone waits for the answer.
func (r *pushReq) respond(resp pushResp) {
	r.reply <- resp
	r.host.release(int64(len(r.items)), r.bytes)
}

type pushResp struct {
	results []queen.Result
	err     error
}

// commitDone tells a partition actor that its in-flight commit finished.
// A commit that needs nothing more of the actor finishes without it (see
// partitionActor.flight).
type commitDone struct {
	partitionID uuid.UUID
}

// The states of partitionActor.flight.
const (
	// flightNone: no commit in flight, or the last one finished without a
	// commitDone.
	flightNone int32 = iota
	// flightSilent: a commit is in flight, and its outcome may finish it
	// without a commitDone (no request waits behind it).
	flightSilent
	// flightWait: a commit is in flight and the actor waits for its
	// commitDone (requests wait: left by the fuse limits when it started,
	// or come meanwhile; or the actor refused to passivate).
	flightWait
)

// partitionActor serialises one partition's pushes. Receive never blocks: a
// commit runs in a goroutine and reports back with commitDone when the
// actor needs it (flight), while requests that arrive meanwhile wait in
// pending and are fused into the next commit.
// It is what every active partition costs, so it holds nothing else (an
// idle one: 120 bytes here, its cache, and protoactor's process).
type partitionActor struct {
	host        *Host
	key         partitionKey
	partitionID uuid.UUID
	pending     []*pushReq // nil while idle: an answered request is not kept
	pendingN    int32
	committing  bool
	refused     bool // refused to passivate: tell the parent once idle
	// flight is the in-flight commit's handshake with its outcome, which
	// runs on the bundler's goroutine (flightNone, flightSilent,
	// flightWait). Spread thin, a partition gets one push per commit and
	// nothing waits when its commit finishes: a commitDone would cost a
	// message and a mailbox run per (partition, commit) to say so (issue
	// 42). So the outcome of a commit that succeeded, with the partition's
	// id unchanged, moves flightSilent to flightNone and sends nothing; the
	// actor, which still thinks the commit in flight, learns it finished
	// when it next needs to (inFlight). A commit started with requests
	// still pending (the fuse limits) starts in flightWait, and an actor
	// that comes to wait moves flightSilent to flightWait first; the
	// outcome then sends commitDone as before.
	flight atomic.Int32
	// num is the partition's number from the last commit's outcome, 0
	// when unknown (none yet, or it failed): with the cache's watermark it
	// lets the next commit take the partition's row lock at the bump
	// (queen.PushBatch.PartitionNum). Written by the outcome before it
	// settles flight, so the actor reads the outcome's value once it knows
	// the commit finished.
	num      atomic.Int64
	pendingB int64
	cache    HashCache
}

// inFlight reports whether a commit is still in flight and, if so, makes
// sure its outcome sends commitDone (the actor waits for it). A commit
// that finished without one is over: committing is cleared.
func (a *partitionActor) inFlight() bool {
	if !a.committing {
		return false
	}
	if a.flight.CompareAndSwap(flightSilent, flightWait) || a.flight.Load() == flightWait {
		return true
	}
	a.committing = false
	return false
}

func (a *partitionActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *pushReq:
		if a.pendingN > 0 && (int(a.pendingN)+len(m.items) > a.host.cfg.MaxPendingItems || a.pendingB+m.bytes > a.host.cfg.MaxPendingBytes) {
			a.host.metrics.Overloads.Inc()
			m.respond(pushResp{err: queen.ErrOverloaded.With("partition %q of queue %q has %d items (%d bytes) waiting (limits %d items, %d bytes); retry with the same transaction ids",
				m.key.partition, m.key.queue, a.pendingN, a.pendingB, a.host.cfg.MaxPendingItems, a.host.cfg.MaxPendingBytes)})
			return
		}
		a.pending = append(a.pending, m)
		a.pendingN += int32(len(m.items))
		a.pendingB += m.bytes
		a.host.metrics.MailboxDepth.Add(float64(len(m.items)))
		if !a.inFlight() {
			a.startCommit(ctx)
		}
	case *commitDone:
		if a.host.cfg.onCommitDone != nil {
			a.host.cfg.onCommitDone(a.key)
		}
		a.committing = false
		a.flight.Store(flightNone)
		a.partitionID = m.partitionID
		if len(a.pending) > 0 {
			a.startCommit(ctx)
		} else if a.refused {
			// Idle now: the parent may still be over MaxActivePartitions
			// because of the refusal, with no spawn coming to re-ask.
			a.refused = false
			ctx.Send(a.host.parent, &partitionIdle{})
		}
	case *passivateReq:
		if a.inFlight() || len(a.pending) > 0 {
			if a.host.cfg.onRefusing != nil {
				a.host.cfg.onRefusing(a.key)
			}
			a.refused = true
			ctx.Send(a.host.parent, &passivateRefused{key: a.key})
			return
		}
		// Idle: nothing waits and nothing commits (a commit's outcome was
		// observed before its commitDone arrived, or before it finished
		// without one). The parent holds the
		// pushes that come meanwhile and hands them to the next
		// incarnation once this one has terminated.
		a.cache.Passivate()
		if a.host.cfg.onStopping != nil {
			a.host.cfg.onStopping(a.key)
		}
		ctx.Stop(ctx.Self())
	case *actor.Stopped:
		ctx.Send(a.host.parent, &partitionStopped{key: a.key, pid: ctx.Self(), id: a.partitionID})
	case *actor.Stopping:
		for _, r := range a.pending {
			r.respond(pushResp{err: queen.ErrShuttingDown})
		}
		a.host.metrics.MailboxDepth.Sub(float64(a.pendingN))
		a.pending, a.pendingN, a.pendingB = nil, 0, 0
	}
}

// startCommit takes whole pending requests, up to MaxFusedItems items (at least
// one request), and commits them in one transaction.
func (a *partitionActor) startCommit(ctx actor.Context) {
	take, n, nb := 0, 0, int64(0)
	for take < len(a.pending) && (take == 0 || (n+len(a.pending[take].items) <= a.host.cfg.MaxFusedItems && nb+a.pending[take].bytes <= a.host.cfg.MaxFusedBytes)) {
		n += len(a.pending[take].items)
		nb += a.pending[take].bytes
		take++
	}
	batch := &queen.PushBatch{
		PartitionID:  a.partitionID,
		Items:        make([]*queen.Item, 0, n),
		PartitionNum: a.num.Load(),
	}
	for _, r := range a.pending[:take] {
		batch.Items = append(batch.Items, r.items...)
	}
	batch.LeaderOf = rules.Leaders(batch.Items)
	// Prepared while the requests are still pending: should it panic, the
	// guardian stops the actor, which answers them (*actor.Stopping).
	a.cache.Prepare(batch)

	reqs := make([]*pushReq, take)
	copy(reqs, a.pending[:take])
	// The taken requests must not stay reachable from the actor once
	// answered (their items and payloads would live as long as it).
	clear(a.pending[:take])
	if a.pending = a.pending[take:]; len(a.pending) == 0 {
		a.pending = nil
	}
	a.pendingN -= int32(n)
	a.pendingB -= nb
	a.host.metrics.MailboxDepth.Sub(float64(n))
	a.committing = true
	if len(a.pending) > 0 {
		// The fuse limits left requests waiting: this commit's outcome
		// must wake the actor for them.
		a.flight.Store(flightWait)
	} else {
		a.flight.Store(flightSilent)
	}

	self := ctx.Self()
	root := ctx.ActorSystem().Root
	startID := a.partitionID
	job := &commitJob{key: a.key, batch: batch, bytes: nb, done: func(out queen.PushOutcome, err error) {
		// The id the actor learns (a commitDone, allocated only when sent).
		doneID := batch.PartitionID
		if err == nil {
			a.cache.Observe(batch, &out)
			a.num.Store(out.PartitionNum)
		} else {
			a.num.Store(0)
			a.cache.Forget()
			if errors.Is(err, queen.ErrPartitionGone) {
				// The queue was deleted: the next push resolves (and
				// recreates) the partition.
				doneID = uuid.Nil
			}
		}
		// Nothing more for the actor to learn (no error, the id it had),
		// and no request waits (flightSilent): finish without a message. Decided before
		// the answers go out, so an actor whose push was answered this way
		// is idle (a passivation asked next is not refused).
		silent := err == nil && doneID == startID && a.flight.CompareAndSwap(flightSilent, flightNone)
		a.host.metrics.FusedRequests.Observe(float64(len(reqs)))
		i := 0
		for _, r := range reqs {
			res := out.Results[i : i+len(r.items) : i+len(r.items)]
			i += len(r.items)
			r.respond(pushResp{results: res})
		}
		if !silent {
			root.Send(self, &commitDone{partitionID: doneID})
		}
	}}
	if batch.PartitionID != uuid.Nil {
		a.host.bundler.submit(job)
		return
	}
	// First commit of this partition: resolve (or create) it off the
	// committers, so new partitions never hold up pushes to known ones;
	// the resolver creates the partitions of many first commits at once.
	a.host.resolver.resolve(a.key, func(id uuid.UUID, err error) {
		if err != nil {
			job.done(failAll(batch, err), err)
			return
		}
		batch.PartitionID = id
		a.host.bundler.submit(job)
	})
}

func failAll(b *queen.PushBatch, err error) queen.PushOutcome {
	qe := queen.AsError(err)
	out := queen.PushOutcome{Results: make([]queen.Result, len(b.Items)), LastOffset: -1}
	for i := range out.Results {
		out.Results[i] = queen.FailedResult(b.PartitionID, qe)
	}
	return out
}

func (k partitionKey) String() string { return fmt.Sprintf("%s/%s", k.queue, k.partition) }
