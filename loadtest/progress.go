package loadtest

import (
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/queen-mq/queen-go/loadtest/consumers"
	"github.com/queen-mq/queen-go/loadtest/produce"
	"github.com/queen-mq/queen-go/loadtest/report"
)

// DrainProgressEvery is how often a run whose progress goes to a log (not
// a terminal) and whose load-time progress line is the timeline sampler's
// (broker runs) writes its progress line while the consumers drain, once
// the sampler has stopped: a drain with poison messages can take longer
// than the load, and a log must show that it moves.
const DrainProgressEvery = 10 * time.Second

// progress writes the run's progress line while the producers run, and
// while the consumers drain after them.
type progress struct {
	w     io.Writer
	live  bool
	every time.Duration
	// sampled: during the load the timeline sampler writes the line of a
	// log; the loop runs (every DrainProgressEvery) only from draining on.
	sampled bool
	label   string
	c       *produce.Counters
	// cc is the consumers' counters (nil: no consumers).
	cc    *consumers.Counters
	start time.Time
	// drain is set once the producers stopped and the consumers drain,
	// drainAt (Unix nanoseconds) when.
	drain   atomic.Bool
	drainAt atomic.Int64
	dur     time.Duration
	stop    chan struct{}
	done    chan struct{}
}

// startProgress starts the progress line. sampled: a timeline sampler
// runs, and in a log (not live) its line every SampleEvery is the progress
// line, so long runs stay readable; the drain's lines then come every
// DrainProgressEvery (draining).
func startProgress(cfg *Config, c *produce.Counters, cc *consumers.Counters, start time.Time, sampled bool) *progress {
	if cfg.Progress == nil {
		return nil
	}
	p := &progress{w: cfg.Progress, live: cfg.ProgressLive, every: cfg.ProgressEvery, label: cfg.Label, c: c, cc: cc,
		start: start, dur: cfg.Duration, stop: make(chan struct{}), done: make(chan struct{})}
	if p.live {
		p.every = 500 * time.Millisecond
	}
	if sampled && !p.live {
		p.sampled = true
		close(p.done)
		return p
	}
	go p.loop(p.every, start, p.done)
	return p
}

// loop writes the line every every until stop, its rates from the
// counters at from on; it closes done when it returns.
func (p *progress) loop(every time.Duration, from time.Time, done chan struct{}) {
	defer close(done)
	t := time.NewTicker(every)
	defer t.Stop()
	lastSent, lastAcked, lastAt := int64(0), int64(0), from
	if from != p.start { // from draining: the rates from then on
		lastSent = p.c.Sent.Load()
		if p.cc != nil {
			lastAcked = p.cc.Acked.Load()
		}
	}
	for {
		select {
		case <-p.stop:
			if p.live {
				fmt.Fprint(p.w, "\r\x1b[K")
			}
			return
		case now := <-t.C:
			sent, acked := p.c.Sent.Load(), int64(0)
			if p.cc != nil {
				acked = p.cc.Acked.Load()
			}
			secs := now.Sub(lastAt).Seconds()
			rate, ackRate := float64(sent-lastSent)/secs, float64(acked-lastAcked)/secs
			lastSent, lastAcked, lastAt = sent, acked, now
			if p.live {
				fmt.Fprint(p.w, "\r\x1b[K"+p.short(now, rate, ackRate))
			} else {
				fmt.Fprintln(p.w, p.line(now, rate, ackRate))
			}
		}
	}
}

func (p *progress) line(now time.Time, rate, ackRate float64) string {
	label := ""
	if p.label != "" {
		label = " [" + p.label + "]"
	}
	el := now.Sub(p.start).Truncate(100 * time.Millisecond)
	s := fmt.Sprintf("loadtest: progress%s %s/%s: %s items/s, sent %s, queued %s, duplicate %s, failed %s",
		label, el, p.dur, report.Commas(int64(rate)), report.Commas(p.c.Sent.Load()), report.Commas(p.c.Queued.Load()),
		report.Commas(p.c.Duplicate.Load()), report.Commas(p.c.Failed.Load()))
	if n := p.c.RequestErrors.Load(); n > 0 {
		s += ", request errors " + report.Commas(n)
	}
	if p.cc != nil {
		s += fmt.Sprintf("; consumed: %s acked/s, acked %s, handled %s, redelivered %s, dead-lettered %s",
			report.Commas(int64(ackRate)), report.Commas(p.cc.Acked.Load()), report.Commas(p.cc.Handled.Load()),
			report.Commas(p.cc.Redelivered.Load()), report.Commas(p.cc.DeadLettered.Load()))
		if n := p.cc.PopErrors.Load() + p.cc.AckErrors.Load(); n > 0 {
			s += ", consumer errors " + report.Commas(n)
		}
	}
	switch {
	case p.drain.Load():
		s += fmt.Sprintf(" (consumers draining for %s)", now.Sub(time.Unix(0, p.drainAt.Load())).Truncate(time.Second))
	case el > p.dur:
		s += " (retrying failed items)"
	}
	return s
}

// short is the live line, kept narrow so that rewriting it in place works
// on an 80-column terminal.
func (p *progress) short(now time.Time, rate, ackRate float64) string {
	label := ""
	if p.label != "" {
		label = p.label + " "
	}
	el := now.Sub(p.start).Truncate(100 * time.Millisecond)
	s := fmt.Sprintf("%s%s/%s  %s items/s  sent %s  queued %s  dup %s  failed %s",
		label, el, p.dur, report.Commas(int64(rate)), report.Commas(p.c.Sent.Load()), report.Commas(p.c.Queued.Load()),
		report.Commas(p.c.Duplicate.Load()), report.Commas(p.c.Failed.Load()))
	if n := p.c.RequestErrors.Load(); n > 0 {
		s += " err " + report.Commas(n)
	}
	if p.cc != nil {
		s += fmt.Sprintf("  acked %s (%s/s) dlq %s", report.Commas(p.cc.Acked.Load()), report.Commas(int64(ackRate)), report.Commas(p.cc.DeadLettered.Load()))
		if p.drain.Load() {
			s += " draining"
		}
	}
	return s
}

// draining notes that the producers stopped and the consumers drain. When
// the timeline sampler wrote a log's lines during the load (it has stopped
// now), the line is written every DrainProgressEvery from here on, until
// finish.
func (p *progress) draining() {
	p.drainingEvery(DrainProgressEvery)
}

// drainingEvery is draining with the log's interval (tests shorten it).
func (p *progress) drainingEvery(every time.Duration) {
	if p == nil {
		return
	}
	now := time.Now()
	p.drainAt.Store(now.UnixNano())
	p.drain.Store(true)
	if p.sampled && p.w != nil {
		p.sampled = false
		p.done = make(chan struct{})
		go p.loop(every, now, p.done)
	}
}

func (p *progress) finish() {
	if p == nil {
		return
	}
	close(p.stop)
	<-p.done
}
