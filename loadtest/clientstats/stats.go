package clientstats

import (
	"math"
	"sync"
	"time"

	"github.com/queen-mq/queen-go/loadtest/report"
)

// Bucket is the resolution of the client statistics.
const Bucket = 100 * time.Millisecond

// Stats counts the clients' requests, errors and failed items over
// time, so what the clients saw around each fault can be told from the
// rest. A nil *Stats records nothing.
type Stats struct {
	start  time.Time
	mu     sync.Mutex
	reqs   []int64 // requests per bucket
	failed []int64 // items answered failed per bucket
	errs   []errEvent
}

type errEvent struct {
	bucket int
	kind   string
}

// New is the statistics of a run that starts at start (the zero of every
// window).
func New(start time.Time) *Stats { return &Stats{start: start} }

// Start is the run's start New was given.
func (s *Stats) Start() time.Time { return s.start }

// Record books one request of op ("push", "pop", "ack") ending now; kind
// is "" when it got its answers, else what went wrong ("push:timeout",
// "push:failed:unavailable", ...).
func (s *Stats) Record(kind string) { s.RecordFailed(kind, 0) }

// RecordFailed is Record for a push whose reply answered items failed.
func (s *Stats) RecordFailed(kind string, items int64) {
	if s == nil {
		return
	}
	s.Add(max(0, int(time.Since(s.start)/Bucket)), kind, items)
}

// Add books one request in bucket b (a Bucket-long stretch, from start);
// kind and items as RecordFailed's.
func (s *Stats) Add(b int, kind string, items int64) {
	s.mu.Lock()
	for len(s.reqs) <= b {
		s.reqs = append(s.reqs, 0)
		s.failed = append(s.failed, 0)
	}
	s.reqs[b]++
	s.failed[b] += items
	if kind != "" {
		s.errs = append(s.errs, errEvent{b, kind})
	}
	s.mu.Unlock()
}

// Window sums the requests, errors (by kind) and failed items of [from, to)
// since start (to <= from: an empty window).
func (s *Stats) Window(from, to time.Duration) report.ClientErrors {
	s.mu.Lock()
	defer s.mu.Unlock()
	ce := report.ClientErrors{ByKind: map[string]int64{}}
	if to <= from {
		return ce
	}
	ce.Seconds = math.Round((to-from).Seconds()*1000) / 1000
	lo, hi := bucketSpan(from, to)
	for b := lo; b < hi && b < len(s.reqs); b++ {
		ce.Requests += s.reqs[b]
		ce.FailedItems += s.failed[b]
	}
	for _, e := range s.errs {
		if e.bucket >= lo && e.bucket < hi {
			ce.Errors++
			ce.ByKind[e.kind]++
		}
	}
	ce.ErrorRate = ErrorRate(ce)
	return ce
}

// bucketSpan is the buckets [lo, hi) of the stretch [from, to): each end
// rounded to the nearest bucket boundary, so that stretches which meet
// share no bucket and a bucket is counted once.
func bucketSpan(from, to time.Duration) (lo, hi int) {
	return max(0, int((from+Bucket/2)/Bucket)), int((to + Bucket/2) / Bucket)
}

// LastError is the end of the last bucket of [from, to) with a client
// error, as time since start (-1: none).
func (s *Stats) LastError(from, to time.Duration) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	lo, hi := bucketSpan(from, to)
	last := -1
	for _, e := range s.errs {
		if e.bucket >= lo && e.bucket < hi {
			last = max(last, e.bucket)
		}
	}
	if last < 0 {
		return -1
	}
	return time.Duration(last+1) * Bucket
}

// ErrorRate is c's errors over its requests, to 1e-5 (0 without requests).
func ErrorRate(c report.ClientErrors) float64 {
	if c.Requests == 0 {
		return 0
	}
	return math.Round(float64(c.Errors)/float64(c.Requests)*1e5) / 1e5
}
