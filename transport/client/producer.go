package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/transport/wire"
)

// The async producer's defaults and limits (ProducerOptions).
const (
	DefaultLinger          = 5 * time.Millisecond
	DefaultMaxBatchItems   = 100
	DefaultMaxBatchBytes   = 1 << 20
	DefaultMaxInFlight     = 8
	DefaultBufferItems     = 10000
	DefaultRequestTimeout  = 10 * time.Second
	DefaultRetryBackoff    = 10 * time.Millisecond
	DefaultMaxRetryBackoff = time.Second

	// maxBatchItems is the broker's limit of items per request (SPEC.md §10).
	maxBatchItems = 10000
	// maxBatchBytes keeps a request below the broker's 16 MiB body limit
	// (SPEC.md §10, §11) with room for JSON escapes.
	maxBatchBytes = 12 << 20
	// itemOverhead is the bytes an item adds to a request besides its
	// strings and payload (keys, quotes, commas).
	itemOverhead = 64
)

// ProducerOptions configures a Producer. Zero values take the defaults;
// values out of range are clamped into it.
type ProducerOptions struct {
	// Linger is how long an item waits for others to share its request
	// before the request leaves anyway (default 5 ms; negative: no wait, a
	// request leaves as soon as a request slot is free). A request leaves
	// earlier when MaxBatchItems or MaxBatchBytes are reached, or during
	// Flush and Close.
	Linger time.Duration
	// MaxBatchItems is the most items per request (default 100, 1..10000:
	// the broker refuses larger requests, SPEC.md §10).
	MaxBatchItems int
	// MaxBatchBytes is the most bytes of items per request, counted as the
	// items' strings and payloads plus 64 bytes each (default 1 MiB, 1 KiB..
	// 12 MiB: the broker's body limit is 16 MiB). An item larger than this
	// goes alone in a request.
	MaxBatchBytes int
	// MaxInFlight is the most push requests this producer has in flight at
	// a time (default 8, at least 1). A partition is in at most one request
	// at a time, so publishes to one partition are stored in publish order,
	// retries included.
	MaxInFlight int
	// BufferItems is the most items published and not yet resolved
	// (waiting, in flight or waiting for a retry; default 10,000, at least
	// 1). Publish on a full buffer blocks until an item resolves, or with
	// ErrorOnFull returns ErrBufferFull; an item is never dropped.
	BufferItems int
	// ErrorOnFull makes Publish return ErrBufferFull at once when the
	// buffer is full (default false: Publish blocks until there is room or
	// its context ends).
	ErrorOnFull bool
	// RequestTimeout bounds one push request (default 10 s). A request that
	// times out has an unknown outcome: its items are sent again with the
	// same transactionIds.
	RequestTimeout time.Duration
	// RetryBackoff is the wait before a partition's items are sent again
	// after a failed verdict or a failed request (default 10 ms); it doubles
	// with each consecutive failure of the partition up to MaxRetryBackoff
	// (default 1 s), and resets on a verdict.
	RetryBackoff    time.Duration
	MaxRetryBackoff time.Duration
	// MaxAttempts bounds the sends of one item (default 0: no bound; the
	// item is retried until it gets a verdict, its context ends or Close
	// gives up). Past it the item resolves with an *UndeliveredError whose
	// Cause is ErrMaxAttempts.
	MaxAttempts int
	// DeliveryTimeout bounds the time from Publish to the last send of an
	// item (default 0: no bound). An item still without a verdict past it
	// is not sent again: it resolves with an *UndeliveredError whose Cause
	// is ErrDeliveryTimeout.
	DeliveryTimeout time.Duration
}

func (o ProducerOptions) withDefaults() ProducerOptions {
	if o.Linger == 0 {
		o.Linger = DefaultLinger
	}
	if o.MaxBatchItems <= 0 {
		o.MaxBatchItems = DefaultMaxBatchItems
	}
	o.MaxBatchItems = min(o.MaxBatchItems, maxBatchItems)
	if o.MaxBatchBytes <= 0 {
		o.MaxBatchBytes = DefaultMaxBatchBytes
	}
	o.MaxBatchBytes = min(max(o.MaxBatchBytes, 1<<10), maxBatchBytes)
	if o.MaxInFlight <= 0 {
		o.MaxInFlight = DefaultMaxInFlight
	}
	if o.BufferItems <= 0 {
		o.BufferItems = DefaultBufferItems
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = DefaultRequestTimeout
	}
	if o.RetryBackoff <= 0 {
		o.RetryBackoff = DefaultRetryBackoff
	}
	if o.MaxRetryBackoff <= 0 {
		o.MaxRetryBackoff = DefaultMaxRetryBackoff
	}
	o.MaxRetryBackoff = max(o.MaxRetryBackoff, o.RetryBackoff)
	o.MaxAttempts = max(o.MaxAttempts, 0)
	o.DeliveryTimeout = max(o.DeliveryTimeout, 0)
	return o
}

// Errors of the async producer.
var (
	// ErrBufferFull: Publish with ErrorOnFull found BufferItems items
	// outstanding; the item was not accepted (nothing sent).
	ErrBufferFull = errors.New("client: the producer's buffer is full")
	// ErrProducerClosed: Publish after Close (the item was not accepted),
	// or the Cause of an item Close gave up on.
	ErrProducerClosed = errors.New("client: the producer is closed")
	// ErrDeliveryTimeout is the Cause of an item not sent again because its
	// DeliveryTimeout passed.
	ErrDeliveryTimeout = errors.New("client: the item's delivery timeout passed")
	// ErrMaxAttempts is the Cause of an item sent MaxAttempts times without
	// a verdict.
	ErrMaxAttempts = errors.New("client: the item was sent MaxAttempts times without a verdict")
)

// UndeliveredError is the result of an item that was sent at least once,
// got no verdict, and is not sent again: its outcome is unknown. It may be
// stored; a later push of the same transactionId to the same partition inside
// the queue's window is answered duplicate with the stored message's id
// (SPEC.md §3).
type UndeliveredError struct {
	TransactionID string
	// Attempts is how often the item was sent.
	Attempts int
	// Last is the last failure: the item's failed verdict as a *queen.Error
	// (its code, e.g. lock_timeout), or the request's error (e.g.
	// queen.ErrTimeout).
	Last error
	// Cause is why sending stopped: the Publish context's error,
	// ErrDeliveryTimeout, ErrMaxAttempts or ErrProducerClosed.
	Cause error
}

func (e *UndeliveredError) Error() string {
	return fmt.Sprintf("client: no verdict for transactionId %q after %d sends (%v; last failure: %v): outcome unknown", e.TransactionID, e.Attempts, e.Cause, e.Last)
}

// Unwrap gives Cause and Last, so errors.Is(err, context.Canceled) and
// errors.Is(err, queen.ErrTimeout) work.
func (e *UndeliveredError) Unwrap() []error {
	out := make([]error, 0, 2)
	for _, err := range []error{e.Cause, e.Last} {
		if err != nil {
			out = append(out, err)
		}
	}
	return out
}

// ProducerStats are a producer's running totals (Producer.Stats).
type ProducerStats struct {
	// Published counts the items Publish accepted.
	Published int64
	// Requests counts push requests sent; RequestErrors those that got no
	// verdicts (timeouts, transport errors, refusals).
	Requests, RequestErrors int64
	// Sent counts the items of every request, retries included; Retries the
	// sends of an item after its first.
	Sent, Retries int64
	// Queued, Duplicate and Failed count the items' verdicts: every failed
	// verdict is counted (a retried item may be failed several times and then
	// queued).
	Queued, Duplicate, Failed int64
	// Undelivered counts items resolved with an error (an *UndeliveredError,
	// a refusal, or a context error before the first send).
	Undelivered int64
}

// Pending is one published item's future: Done is closed when the item has
// its result, which Result and Wait return.
type Pending struct {
	item     PushItem
	ctx      context.Context
	at       time.Time
	size     int
	attempts int
	last     error
	pq       *partQueue
	fn       func(wire.PushReply, error)
	done     chan struct{}
	reply    wire.PushReply
	err      error
}

// Done is closed once the item has a verdict or a definite error.
func (pd *Pending) Done() <-chan struct{} { return pd.done }

// Result returns the item's verdict (Status queued or duplicate; MessageID
// is the stored message's id, for a duplicate the original's) or its error;
// valid once Done is closed. The error is a *queen.Error for a request the
// broker refused (4xx, nothing written), an *UndeliveredError (outcome
// unknown), or the Publish context's error when the item was never sent.
// The reply's Index is the item's place in the request that carried it.
func (pd *Pending) Result() (wire.PushReply, error) { return pd.reply, pd.err }

// Wait waits for the item's result (Result); when ctx ends first it returns
// ctx's error and leaves the item as it is.
func (pd *Pending) Wait(ctx context.Context) (wire.PushReply, error) {
	select {
	case <-pd.done:
		return pd.reply, pd.err
	case <-ctx.Done():
		return wire.PushReply{}, ctx.Err()
	}
}

// partKey names a partition; the empty partition is Default (SPEC.md §3).
type partKey struct{ queue, partition string }

// partQueue is one partition's waiting items, in publish order.
type partQueue struct {
	key   partKey
	items []*Pending
	bytes int
	// busy: the partition is in a request in flight, or waits out a retry
	// backoff; its items are not eligible.
	busy     bool
	failures int
	timer    *time.Timer
}

// Producer is an asynchronous, idempotent producer over a Client: Publish
// hands it one item and returns at once; it batches items into push requests
// (SPEC.md §3) with a linger, sends up to MaxInFlight of them at a time, and
// resolves each item with its verdict. An item answered failed, or carried by
// a request that timed out or failed with a retryable error, is sent again
// with the same transactionId (so if it was stored, the retry is answered
// duplicate with the original's id, and it is never stored twice) until it
// gets a verdict, its Publish context ends, or a bound of ProducerOptions is
// reached. An item without a TransactionID gets a UUIDv7 one at Publish, so
// its retries are exact too. Items of one partition go in publish order, one
// request at a time. It is safe for concurrent use; Close releases it.
type Producer struct {
	push  PushFunc
	opts  ProducerOptions
	space chan struct{}
	// closing is closed by Close: blocked Publish calls return.
	closing chan struct{}
	stop    chan struct{}
	wake    chan struct{}
	reqCtx  context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	once    sync.Once

	mu    sync.Mutex
	parts map[partKey]*partQueue
	// ready holds the partitions with eligible items (not busy), in the
	// order they became ready.
	ready         []*partQueue
	eligible      int
	eligibleBytes int
	lingerStart   time.Time
	inflight      int
	outstanding   int
	flushing      int
	closed        bool
	abandoned     bool
	idle          chan struct{}
	stats         struct{ published, requests, requestErrors, sent, retries, queued, duplicate, failed, undelivered atomic.Int64 }
}

// PushFunc sends one push request (SPEC.md §3) with the contract of
// Client.Push: one reply per item, in order, when the broker answered with
// verdicts (201, or 503 with every item failed; err may then be set too);
// otherwise no replies and an error, a *queen.Error whose Retryable says
// whether sending the same items again can help (a timeout, an unavailable
// broker) or not (a 4xx refusal, nothing written).
type PushFunc func(ctx context.Context, items []PushItem) ([]wire.PushReply, error)

// NewProducer returns a producer that pushes with c.Push (queen.v1.push over
// NATS, POST /api/v1/push over HTTP; SPEC.md §3, §11) with opts (zero
// values: the defaults). Over a shard-aware c
// (ShardAware) each request is split by shard and its groups go at once to
// the shards' subjects (SPEC.md §9); MaxInFlight still counts the
// producer's requests, and a partition stays in one request at a time.
func NewProducer(c *Client, opts ProducerOptions) *Producer {
	return NewProducerFunc(c.Push, opts)
}

// NewProducerFunc returns a producer that sends its requests with push:
// Client.Push, or a wrapper of it (the load harness counts requests). push is
// called from several goroutines at once (up to MaxInFlight) and must
// return when its context ends (Close relies on it).
func NewProducerFunc(push PushFunc, opts ProducerOptions) *Producer {
	opts = opts.withDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	p := &Producer{
		push: push, opts: opts,
		space:   make(chan struct{}, opts.BufferItems),
		closing: make(chan struct{}),
		stop:    make(chan struct{}),
		wake:    make(chan struct{}, 1),
		reqCtx:  ctx, cancel: cancel,
		parts: map[partKey]*partQueue{},
	}
	p.wg.Add(1)
	go p.loop()
	return p
}

// Publish hands item to the producer and returns its future. An item the
// broker would refuse for its text (PushItem.Validate: invalid UTF-8, a
// control character, a name over 255 bytes, ...) is refused at once with
// the broker's *queen.Error (400, naming the bare field, e.g.
// "transactionId") and not buffered. It blocks while the buffer is full
// (BufferItems; with ErrorOnFull it returns ErrBufferFull instead). It returns ctx's error if ctx ends first, and
// ErrProducerClosed after Close; the item is then not sent. ctx also bounds
// the item's delivery: once it ends, the item is not sent again (its result
// is ctx's error if it was never sent, an *UndeliveredError otherwise); a
// request already in flight still delivers its verdict.
func (p *Producer) Publish(ctx context.Context, item PushItem) (*Pending, error) {
	pd := &Pending{done: make(chan struct{})}
	if err := p.enqueue(ctx, item, pd); err != nil {
		return nil, err
	}
	return pd, nil
}

// PublishFunc is Publish with a callback instead of a future: fn is called
// once with the item's result (as Pending.Result) from one of the producer's
// goroutines; it should return quickly (the producer's requests wait on
// it) and must not call Flush or Close (they wait for it). fn is not called
// when PublishFunc returns an error.
func (p *Producer) PublishFunc(ctx context.Context, item PushItem, fn func(wire.PushReply, error)) error {
	return p.enqueue(ctx, item, &Pending{fn: fn})
}

func (p *Producer) enqueue(ctx context.Context, item PushItem, pd *Pending) error {
	// Refused before it is buffered: JSON encoding would turn invalid UTF-8
	// into U+FFFD, and the broker would refuse the whole request the item
	// is batched into.
	if err := item.Validate(-1); err != nil {
		return err
	}
	select {
	case <-p.closing:
		return ErrProducerClosed
	default:
	}
	select {
	case p.space <- struct{}{}:
	default:
		if p.opts.ErrorOnFull {
			return ErrBufferFull
		}
		select {
		case p.space <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		case <-p.closing:
			return ErrProducerClosed
		}
	}
	if err := ctx.Err(); err != nil {
		<-p.space
		return err
	}
	if item.TransactionID == "" {
		id, err := uuid.NewV7()
		if err != nil {
			id = uuid.New()
		}
		item.TransactionID = id.String()
	}
	pd.item, pd.ctx = item, ctx
	pd.at = time.Now()
	pd.size = len(item.Queue) + len(item.Partition) + len(item.TransactionID) + len(item.TraceID) + len(item.Payload) + itemOverhead
	key := partKey{item.Queue, item.Partition}
	if key.partition == "" {
		key.partition = queen.DefaultPartition
	}

	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		<-p.space
		return ErrProducerClosed
	}
	pq := p.parts[key]
	if pq == nil {
		pq = &partQueue{key: key}
		p.parts[key] = pq
		p.ready = append(p.ready, pq)
	}
	pd.pq = pq
	pq.items = append(pq.items, pd)
	pq.bytes += pd.size
	p.outstanding++
	signal := false
	if !pq.busy {
		if p.eligible == 0 {
			p.lingerStart = pd.at
			signal = true
		}
		p.eligible++
		p.eligibleBytes += pd.size
		signal = signal || p.eligible >= p.opts.MaxBatchItems || p.eligibleBytes >= p.opts.MaxBatchBytes
	}
	p.mu.Unlock()
	p.stats.published.Add(1)
	if signal {
		p.signal()
	}
	return nil
}

func (p *Producer) signal() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Flush sends everything outstanding at once (no linger) and waits until
// every item published before or during the call has its result, or ctx
// ends (then ctx's error; the items stay outstanding).
func (p *Producer) Flush(ctx context.Context) error {
	p.mu.Lock()
	if p.outstanding == 0 {
		p.mu.Unlock()
		return nil
	}
	if p.idle == nil {
		p.idle = make(chan struct{})
	}
	idle := p.idle
	p.flushing++
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.flushing--
		p.mu.Unlock()
	}()
	p.signal()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close stops accepting items (Publish returns ErrProducerClosed), drains
// what is outstanding as Flush does, and releases the producer's
// goroutines. When ctx ends before every item has its result, the requests
// in flight are abandoned and every unresolved item resolves with an
// *UndeliveredError (Cause ErrProducerClosed) or, if never sent,
// ErrProducerClosed; Close then returns ctx's error. Calling it again
// waits for the same.
func (p *Producer) Close(ctx context.Context) error {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		close(p.closing)
	}
	p.mu.Unlock()
	err := p.Flush(ctx)
	if err != nil {
		p.abandon()
	}
	p.once.Do(func() { close(p.stop) })
	p.wg.Wait()
	p.cancel()
	return err
}

// Stats returns the producer's running totals.
func (p *Producer) Stats() ProducerStats {
	s := &p.stats
	return ProducerStats{
		Published: s.published.Load(), Requests: s.requests.Load(), RequestErrors: s.requestErrors.Load(),
		Sent: s.sent.Load(), Retries: s.retries.Load(),
		Queued: s.queued.Load(), Duplicate: s.duplicate.Load(), Failed: s.failed.Load(),
		Undelivered: s.undelivered.Load(),
	}
}

// abandon gives up on everything outstanding (Close's context ended).
func (p *Producer) abandon() {
	p.mu.Lock()
	p.abandoned = true
	p.cancel()
	var out []*Pending
	for _, pq := range p.parts {
		out = append(out, pq.items...)
		pq.items, pq.bytes = nil, 0
		if pq.timer != nil {
			pq.timer.Stop()
			pq.timer = nil
		}
	}
	p.ready, p.eligible, p.eligibleBytes = nil, 0, 0
	p.mu.Unlock()
	for _, pd := range out {
		pd.err = undelivered(pd, ErrProducerClosed)
	}
	p.finish(out)
}

// undelivered is the error of pd, which is not sent again because of cause.
func undelivered(pd *Pending, cause error) error {
	if pd.attempts == 0 {
		return cause
	}
	return &UndeliveredError{TransactionID: pd.item.TransactionID, Attempts: pd.attempts, Last: pd.last, Cause: cause}
}

// loop forms requests: while a request slot is free and items are eligible
// and due (a full batch, the linger passed, or a Flush), it takes a batch and
// sends it from a goroutine of its own.
func (p *Producer) loop() {
	defer p.wg.Done()
	t := time.NewTimer(time.Hour)
	t.Stop()
	for {
		var dead []*Pending
		wait := time.Duration(0)
		p.mu.Lock()
		for p.inflight < p.opts.MaxInFlight && p.eligible > 0 {
			now := time.Now()
			if !p.dueLocked(now) {
				wait = p.lingerStart.Add(p.opts.Linger).Sub(now)
				break
			}
			batch := p.takeLocked(&dead)
			if len(batch) == 0 {
				continue
			}
			p.inflight++
			p.wg.Add(1)
			go p.send(batch)
		}
		p.mu.Unlock()
		if len(dead) > 0 {
			p.finish(dead)
		}
		if wait > 0 {
			t.Reset(wait)
		}
		select {
		case <-p.wake:
		case <-t.C:
		case <-p.stop:
			t.Stop()
			return
		}
		t.Stop()
	}
}

func (p *Producer) dueLocked(now time.Time) bool {
	return p.eligible >= p.opts.MaxBatchItems || p.eligibleBytes >= p.opts.MaxBatchBytes ||
		p.flushing > 0 || p.closed || p.opts.Linger < 0 || now.Sub(p.lingerStart) >= p.opts.Linger
}

// takeLocked takes the next request's items from the ready partitions, in
// the order they became ready, each partition's from its head in publish
// order, up to MaxBatchItems and MaxBatchBytes. Every partition it takes from
// becomes busy. Items whose context ended or whose delivery timeout passed
// go to dead with their error instead.
func (p *Producer) takeLocked(dead *[]*Pending) []*Pending {
	var batch []*Pending
	bytes := 0
	now := time.Now()
	n := 0
	for n < len(p.ready) && len(batch) < p.opts.MaxBatchItems {
		pq := p.ready[n]
		if len(batch) > 0 && bytes+pq.items[0].size > p.opts.MaxBatchBytes {
			break
		}
		n++
		p.eligible -= len(pq.items)
		p.eligibleBytes -= pq.bytes
		k, took := 0, 0
		for k < len(pq.items) && len(batch) < p.opts.MaxBatchItems {
			pd := pq.items[k]
			if len(batch) > 0 && bytes+pd.size > p.opts.MaxBatchBytes {
				break
			}
			k++
			pq.bytes -= pd.size
			if err := p.expired(pd, now); err != nil {
				pd.err = err
				*dead = append(*dead, pd)
				continue
			}
			batch = append(batch, pd)
			bytes += pd.size
			took++
		}
		clear(pq.items[:k])
		pq.items = pq.items[k:]
		if len(pq.items) == 0 {
			pq.items = nil
		}
		pq.busy = true
		if took == 0 {
			// Only dead items: the partition is not in this request.
			p.releaseLocked(pq, false)
		}
	}
	clear(p.ready[:n])
	p.ready = p.ready[n:]
	if len(p.ready) == 0 {
		p.ready = nil
	}
	return batch
}

// expired returns the error of pd if it may not be sent (again).
func (p *Producer) expired(pd *Pending, now time.Time) error {
	if err := pd.ctx.Err(); err != nil {
		return undelivered(pd, err)
	}
	if pd.attempts > 0 {
		if p.opts.MaxAttempts > 0 && pd.attempts >= p.opts.MaxAttempts {
			return undelivered(pd, ErrMaxAttempts)
		}
		if p.opts.DeliveryTimeout > 0 && now.Sub(pd.at) >= p.opts.DeliveryTimeout {
			return undelivered(pd, ErrDeliveryTimeout)
		}
	}
	return nil
}

// releaseLocked ends pq's busy spell: at once, or after a backoff when its
// items failed.
func (p *Producer) releaseLocked(pq *partQueue, failed bool) {
	if !failed {
		pq.failures = 0
		p.unbusyLocked(pq)
		return
	}
	d := p.opts.RetryBackoff << min(pq.failures, 30)
	if d <= 0 || d > p.opts.MaxRetryBackoff {
		d = p.opts.MaxRetryBackoff
	}
	pq.failures++
	pq.timer = time.AfterFunc(d, func() {
		p.mu.Lock()
		if pq.timer == nil {
			// Stopped by abandon.
			p.mu.Unlock()
			return
		}
		pq.timer = nil
		p.unbusyLocked(pq)
		p.mu.Unlock()
		p.signal()
	})
}

func (p *Producer) unbusyLocked(pq *partQueue) {
	pq.busy = false
	if len(pq.items) == 0 {
		if p.parts[pq.key] == pq {
			delete(p.parts, pq.key)
		}
		return
	}
	head := pq.items[0].at
	if p.eligible == 0 || head.Before(p.lingerStart) {
		p.lingerStart = head
	}
	p.eligible += len(pq.items)
	p.eligibleBytes += pq.bytes
	p.ready = append(p.ready, pq)
}

// send sends one request and books its items: a verdict resolves an item;
// a failed verdict, or a retryable request error, puts the item back at the
// head of its partition for a retry; a refusal resolves the items with it.
func (p *Producer) send(batch []*Pending) {
	defer p.wg.Done()
	items := make([]PushItem, len(batch))
	for i, pd := range batch {
		items[i] = pd.item
		if pd.attempts > 0 {
			p.stats.retries.Add(1)
		}
		pd.attempts++
	}
	p.stats.sent.Add(int64(len(batch)))
	ctx, cancel := context.WithTimeout(p.reqCtx, p.opts.RequestTimeout)
	replies, err := p.push(ctx, items)
	cancel()
	p.stats.requests.Add(1)

	retry, done := p.classify(batch, replies, err)
	p.mu.Lock()
	p.inflight--
	done = p.requeueLocked(batch, retry, done)
	p.mu.Unlock()
	p.signal()
	p.finish(done)
}

// retry[i] of a sent batch: batch[i] goes back to its partition, after a
// failure (retryFailed: the partition backs off) or unsent (retryUnsent).
const retryFailed, retryUnsent = 1, 2

// classify reads a request's outcome: per item, done (a verdict, or an
// error that is final) or to retry (retryFailed, retryUnsent), and counts
// the verdicts.
func (p *Producer) classify(batch []*Pending, replies []wire.PushReply, err error) (retry []uint8, done []*Pending) {
	retry = make([]uint8, len(batch))
	switch {
	case len(replies) == len(batch):
		var queued, dup, failed int64
		for i, r := range replies {
			pd := batch[i]
			switch r.Status {
			case queen.Queued, queen.Duplicate:
				if r.Status == queen.Queued {
					queued++
				} else {
					dup++
				}
				pd.reply = r
				done = append(done, pd)
			default:
				// failed: not known to be written (SPEC.md §3); every
				// code of a failed verdict is retryable.
				failed++
				pd.last = &queen.Error{Status: 503, Code: r.Code, Message: r.Error, Retryable: true}
				retry[i] = retryFailed
			}
		}
		p.stats.queued.Add(queued)
		p.stats.duplicate.Add(dup)
		p.stats.failed.Add(failed)
	default:
		p.stats.requestErrors.Add(1)
		if err == nil {
			err = queen.ErrInternal.With("the broker answered %d verdicts for %d items", len(replies), len(batch))
		}
		qe := queen.AsError(err)
		switch {
		case qe.Retryable:
			for i, pd := range batch {
				pd.last = err
				retry[i] = retryFailed
			}
		case qe.Index != nil && *qe.Index >= 0 && *qe.Index < len(batch) && len(batch) > 1:
			// One item made the broker refuse the request, and nothing of
			// it was written (SPEC.md §10): the others go again, as if
			// never sent.
			for i, pd := range batch {
				if i == *qe.Index {
					pd.err = err
					done = append(done, pd)
					continue
				}
				pd.attempts--
				retry[i] = retryUnsent
			}
		default:
			for _, pd := range batch {
				pd.err = err
				done = append(done, pd)
			}
		}
	}
	return retry, done
}

// requeueLocked puts the items to retry back at their partitions' heads,
// in order, and releases each partition of the batch once; an item past
// its deadline (or of an abandoned producer) is done with its error
// instead. It returns done with those added. p.mu is held.
func (p *Producer) requeueLocked(batch []*Pending, retry []uint8, done []*Pending) []*Pending {
	now := time.Now()
	var cur *partQueue
	var back []*Pending
	failedPart := false
	flush := func() {
		if cur == nil {
			return
		}
		if len(back) > 0 {
			b := 0
			for _, pd := range back {
				b += pd.size
			}
			cur.items = append(back, cur.items...)
			cur.bytes += b
		}
		if !p.abandoned {
			p.releaseLocked(cur, failedPart)
		}
		cur, back, failedPart = nil, nil, false
	}
	for i, pd := range batch {
		if pd.pq != cur {
			flush()
			cur = pd.pq
		}
		if retry[i] == 0 {
			continue
		}
		var err error
		if p.abandoned {
			err = undelivered(pd, ErrProducerClosed)
		} else {
			err = p.expired(pd, now)
		}
		if err != nil {
			pd.err = err
			done = append(done, pd)
			continue
		}
		if retry[i] == retryFailed {
			failedPart = true
		}
		back = append(back, pd)
	}
	flush()
	return done
}

// finish hands each item its result (callback or future) and frees its
// place in the buffer.
func (p *Producer) finish(pds []*Pending) {
	if len(pds) == 0 {
		return
	}
	var bad int64
	for _, pd := range pds {
		if pd.err != nil {
			bad++
		}
		if pd.fn != nil {
			pd.fn(pd.reply, pd.err)
		} else {
			close(pd.done)
		}
		pd.ctx, pd.pq, pd.item.Payload = nil, nil, nil
		<-p.space
	}
	p.stats.undelivered.Add(bad)
	p.mu.Lock()
	p.outstanding -= len(pds)
	if p.outstanding == 0 && p.idle != nil {
		close(p.idle)
		p.idle = nil
	}
	p.mu.Unlock()
}
