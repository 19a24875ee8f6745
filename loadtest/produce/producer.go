package produce

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/loadtest/clientstats"
	"github.com/queen-mq/queen-go/loadtest/report"
	"github.com/queen-mq/queen-go/loadtest/target"
	"github.com/queen-mq/queen-go/loadtest/txnid"
	"github.com/queen-mq/queen-go/transport/client"
)

// Counters are the run's live totals, shared by the producers and read by
// the progress line, the timeline and the report (counts of items or
// requests since the run's start).
type Counters struct {
	// Requests and RequestErrors count push requests answered and those
	// answered with an error (no item got a verdict).
	Requests, RequestErrors atomic.Int64
	// Sent counts items sent (retries included); Fresh new transactionIds,
	// Repeats re-sends of a recent one, Retries re-sends of a failed item.
	Sent, Fresh, Repeats, Retries atomic.Int64
	// Queued, Duplicate and Failed count the items' verdicts.
	Queued, Duplicate, Failed atomic.Int64
	// GaveUp counts items left unresolved (attempts or the drain ran out),
	// Rejected items refused (4xx), UnknownOutcome items whose request an
	// interrupt abandoned.
	GaveUp, Rejected, UnknownOutcome atomic.Int64
	// Touched, when set (a run with consumers), marks the partitions in
	// which an item was answered queued or duplicate.
	Touched []atomic.Bool
	// Dirty, when set (a run with the in-run audit), marks the partitions
	// an answer came back for (*audit.DirtySet, read by audit.Auditor).
	Dirty interface{ Mark(part int) }
	// Obs, when set (a cluster run), sees every request's outcome.
	Obs *clientstats.Stats
	// Lat is the push requests' latency; WindowGuard counts items not sent
	// again because their original is too old (see Producer.guard).
	Lat         report.Histogram
	WindowGuard atomic.Int64
}

// Touch marks partition part (an index into the run's partitions) as
// holding a message.
func (c *Counters) Touch(part int) {
	if c.Touched != nil && !c.Touched[part].Load() {
		c.Touched[part].Store(true)
	}
}

// mark marks partition part dirty (when the run audits).
func (c *Counters) mark(part int) {
	if c.Dirty != nil {
		c.Dirty.Mark(part)
	}
}

// Ledger is where a producer books its sends and their answers for the
// audit: *audit.Ledger.
type Ledger interface {
	// Sent: the producer sent its sequence number seq.
	Sent(seq uint64)
	// Queued: seq was answered queued with message id id.
	Queued(seq uint64, id uuid.UUID)
	// Duplicate: seq was answered duplicate with message id id; want, when
	// not nil, is the original's id as its queued answer gave it.
	Duplicate(seq uint64, id uuid.UUID, want *[16]byte)
	// Failed: seq was answered failed (or lost with its request).
	Failed(seq uint64)
	// WrongReply: a reply did not say what became of an item (bad says
	// why).
	WrongReply(bad string)
}

// recentSize is how many recently sent transactionIds a producer picks its
// repeats from (a ring: the newest ones).
const recentSize = 1 << 12

// recentID is one entry of the ring of recently sent transactionIds.
type recentID struct {
	seq uint64
	// first is when the id was first sent (unix nanos).
	first int64
	// id is the original's message id, once an answer gave it.
	id    [16]byte
	hasID bool
}

// slot is one item of a request: its sequence number and how often it was
// sent before.
type slot struct {
	seq      uint64
	attempts uint8
	// first is when the id was first sent (unix nanos): a repeat's is its
	// original's.
	first int64
	// ring is the id's position in the ring for a new id (-1 for a
	// repeat): its answer records the message id there.
	ring int32
	// want is the original's message id a repeat must be answered with
	// (hasWant false: not known when it was sent).
	want    [16]byte
	hasWant bool
}

// Producer is a sync producer: it sends batches of Config.Batch items, one
// request in flight at a time, until the run's deadline; then it retries
// its failed items until they are resolved, give up, or the drain deadline
// passes.
type Producer struct {
	idx   int
	cfg   *Config
	parts []string
	snd   target.Sender
	led   Ledger // nil in raw mode: nothing to audit
	c     *Counters
	rng   *rand.Rand

	seq     uint64
	recent  []recentID
	next    int // next ring position in recent
	retries []slot
	// guard is how old (nanoseconds since its first send) an id may be and
	// still be sent again (a repeat or a retry): well inside the queue's
	// dedup window, so that a second queued answer or a second stored
	// frame is a violation, never the window closing.
	guard int64

	codes map[string]int64
	// lastError is the last request error, for the report.
	lastError string

	slots   []slot
	items   []client.PushItem
	results []target.Result
	buf     []byte
}

// New makes sync producer idx (0..txnid.MaxProducers-1) of a run over
// parts (the run's partition names) sending through snd, booking into led
// (nil: none) and counting into c.
func New(idx int, cfg *Config, parts []string, snd target.Sender, led Ledger, c *Counters) *Producer {
	return &Producer{
		idx: idx, cfg: cfg, parts: parts, snd: snd, led: led, c: c,
		rng:     rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(idx)+1)),
		recent:  make([]recentID, 0, recentSize),
		guard:   int64(cfg.Window / 2),
		codes:   map[string]int64{},
		slots:   make([]slot, 0, cfg.Batch),
		items:   make([]client.PushItem, 0, cfg.Batch),
		results: make([]target.Result, cfg.Batch),
	}
}

// Run is the producer's loop: new items until deadline, retries until
// drainBy. ctx ending (an interrupt) stops it at once: the request in
// flight is abandoned (its outcome stays unknown).
func (p *Producer) Run(ctx context.Context, deadline, drainBy time.Time) {
	var backoff time.Duration
	for ctx.Err() == nil {
		now := time.Now()
		fresh := now.Before(deadline)
		if !fresh && (len(p.retries) == 0 || !now.Before(drainBy)) {
			break
		}
		if backoff > 0 && !sleep(ctx, backoff) {
			break
		}
		p.fill(fresh)
		if len(p.slots) == 0 {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, p.cfg.RequestTimeout)
		start := time.Now()
		err := p.snd.Send(rctx, p.items, p.results[:len(p.slots)])
		lat := time.Since(start)
		cancel()
		// Whatever the answer, anything the request wrote is committed
		// by now (or never will be): the audit reads these partitions.
		for _, s := range p.slots {
			p.c.mark(p.part(s.seq))
		}
		if err != nil && ctx.Err() != nil {
			// Interrupted mid-request: these items' outcome is unknown.
			p.c.UnknownOutcome.Add(int64(len(p.slots)))
			break
		}
		p.c.Requests.Add(1)
		p.c.Lat.Record(lat)
		if p.handle(err) {
			backoff = min(max(2*backoff, 20*time.Millisecond), 2*time.Second)
		} else {
			backoff = 0
		}
	}
	// Items still waiting for a retry stay unresolved.
	p.c.GaveUp.Add(int64(len(p.retries)))
	p.retries = p.retries[:0]
}

// fill builds the next request: pending retries first, then (while the run
// lasts) new items and repeats of recently sent transactionIds.
func (p *Producer) fill(fresh bool) {
	b := p.cfg.Batch
	now := time.Now().UnixNano()
	p.slots = p.slots[:0]
	n := min(len(p.retries), b)
	p.slots = append(p.slots, p.retries[:n]...)
	p.retries = append(p.retries[:0], p.retries[n:]...)
	p.c.Retries.Add(int64(n))
	if fresh {
		var repeats, news int64
		for len(p.slots) < b {
			if len(p.recent) > 0 && p.cfg.DupRatio > 0 && p.rng.Float64() < p.cfg.DupRatio {
				// A repeat of a recent id young enough that its window is
				// surely open (else a new id instead).
				r := &p.recent[p.rng.IntN(len(p.recent))]
				if now-r.first < p.guard/2 {
					p.slots = append(p.slots, slot{seq: r.seq, first: r.first, ring: -1, want: r.id, hasWant: r.hasID})
					repeats++
					continue
				}
			}
			seq := p.seq
			p.seq++
			idx := remember(&p.recent, &p.next, recentID{seq: seq, first: now})
			p.slots = append(p.slots, slot{seq: seq, first: now, ring: int32(idx)})
			news++
		}
		p.c.Fresh.Add(news)
		p.c.Repeats.Add(repeats)
	}
	// Materialize the items; payloads share one buffer per request (the
	// senders are done with it when send returns).
	p.items = p.items[:0]
	need := len(p.slots) * (p.cfg.PayloadBytes + 64)
	if cap(p.buf) < need {
		p.buf = make([]byte, 0, need)
	}
	p.buf = p.buf[:0]
	var txn []byte
	for _, s := range p.slots {
		txn = txnid.AppendTxn(txn[:0], p.idx, s.seq)
		start := len(p.buf)
		p.buf = txnid.AppendPayload(p.buf, p.idx, s.seq, p.cfg.PayloadBytes)
		p.items = append(p.items, client.PushItem{
			Queue:         p.cfg.Queue,
			Partition:     p.parts[p.part(s.seq)],
			TransactionID: string(txn),
			Payload:       json.RawMessage(p.buf[start:len(p.buf):len(p.buf)]),
		})
		if p.led != nil {
			p.led.Sent(s.seq)
		}
	}
	p.c.Sent.Add(int64(len(p.slots)))
}

// part is the partition index of this producer's id seq.
func (p *Producer) part(seq uint64) int {
	return txnid.PartIn(p.cfg.Sequential, p.idx, seq, len(p.parts))
}

// learn records the message id an answer gave for s's original in the ring
// (while the ring still holds it).
func (p *Producer) learn(s *slot, id uuid.UUID) {
	if s.ring >= 0 && int(s.ring) < len(p.recent) {
		if r := &p.recent[s.ring]; r.seq == s.seq && !r.hasID {
			r.id, r.hasID = id, true
		}
	}
}

// handle books the answer to the request just sent and reports whether
// anything failed (so the producer backs off).
func (p *Producer) handle(err error) (trouble bool) {
	if err != nil {
		qe := queen.AsError(err)
		p.c.RequestErrors.Add(1)
		p.codes["request:"+qe.Code]++
		p.lastError = qe.Error()
		p.c.Obs.Record("push:" + qe.Code)
		if qe.Retryable {
			for _, s := range p.slots {
				p.retry(s)
			}
		} else {
			// Refused (4xx): sending it again cannot help.
			p.c.Rejected.Add(int64(len(p.slots)))
		}
		return true
	}
	var queued, dup, failed int64
	firstCode := ""
	for i := range p.slots {
		s := &p.slots[i]
		r := &p.results[i]
		if r.Bad != "" && p.led != nil {
			p.led.WrongReply(r.Bad)
		}
		switch r.Status {
		case queen.Queued:
			queued++
			p.c.Touch(p.part(s.seq))
			if p.led != nil {
				p.led.Queued(s.seq, r.ID)
			}
			p.learn(s, r.ID)
		case queen.Duplicate:
			dup++
			p.c.Touch(p.part(s.seq))
			if p.led != nil {
				var want *[16]byte
				if s.hasWant {
					want = &s.want
				}
				p.led.Duplicate(s.seq, r.ID, want)
			}
			if r.ID != uuid.Nil {
				p.learn(s, r.ID)
			}
		default:
			failed++
			if firstCode == "" {
				firstCode = r.Code
			}
			p.codes[r.Code]++
			if p.led != nil {
				p.led.Failed(s.seq)
			}
			p.retry(*s)
		}
	}
	p.c.Queued.Add(queued)
	p.c.Duplicate.Add(dup)
	p.c.Failed.Add(failed)
	if failed > 0 {
		p.c.Obs.RecordFailed("push:failed:"+firstCode, failed)
	} else {
		p.c.Obs.Record("")
	}
	return failed > 0
}

// Codes counts the error codes the producer met ("request:<code>" for a
// request answered with an error, the code of an item answered failed);
// read it after Run.
func (p *Producer) Codes() map[string]int64 { return p.codes }

// LastError is the last request error ("" when none); read it after Run.
func (p *Producer) LastError() string { return p.lastError }

// retry queues s to be sent again with the same transactionId, unless it
// has been sent MaxAttempts times or its original was first sent more than
// half the dedup window ago.
func (p *Producer) retry(s slot) {
	s.attempts++
	if int(s.attempts) >= p.cfg.MaxAttempts {
		p.c.GaveUp.Add(1)
		return
	}
	if time.Now().UnixNano()-s.first > p.guard {
		// Its original may leave the window before this send is probed:
		// a second queued answer would then be right, and the audit could
		// not tell it from a violation.
		p.c.GaveUp.Add(1)
		p.c.WindowGuard.Add(1)
		return
	}
	p.retries = append(p.retries, s)
}

// sleep waits d or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// remember puts e in the ring of recent ids (*recent grows to recentSize,
// then *next is the oldest entry, overwritten) and returns its index there.
func remember(recent *[]recentID, next *int, e recentID) int {
	idx := len(*recent)
	if idx < recentSize {
		*recent = append(*recent, e)
		return idx
	}
	idx = *next
	(*recent)[idx] = e
	*next = (*next + 1) % recentSize
	return idx
}
