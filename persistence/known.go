package persistence

import (
	"context"
	"errors"
	"sync"
)

// knownRows is the set of consumer rows, (partition id, consumer group),
// this Store has seen exist in a committed pop or ack. A pop or an ack of a
// known row skips consume_ensure (its creation on first use, SPEC.md §4),
// which at 10,000 partitions was one statement per partition of every pop
// and ack. It is a cache, never the truth:
//
//   - DeleteGroup and DeleteQueue on this Store empty it;
//   - a row deleted elsewhere (another broker's DeleteGroup or DeleteQueue)
//     is found missing by the row lock that follows: the key is dropped, and
//     a pop that skips locked rows answers that partition busy (its next
//     pop creates the row again), while a call that waits for the lock (an
//     ack, a pop naming its partition) runs once more with the creation
//     (errStaleKnown).
//
// At most maxKnownRows keys (about 100 bytes each: 13 MiB); past it the set
// starts afresh. Safe for concurrent use; the nil *knownRows knows nothing.
type knownRows struct {
	mu sync.Mutex
	m  map[ackKey]struct{}
}

// maxKnownRows bounds knownRows.
const maxKnownRows = 1 << 17

// errStaleKnown: a consumer row taken as known was missing under its lock;
// the attempt rolls back and runs again, creating it (see knownRows).
var errStaleKnown = errors.New("persistence: a known consumer row is gone")

func (k *knownRows) has(key ackKey) bool {
	if k == nil {
		return false
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	_, ok := k.m[key]
	return ok
}

func (k *knownRows) add(keys ...ackKey) {
	if k == nil || len(keys) == 0 {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, key := range keys {
		if k.m == nil || len(k.m) >= maxKnownRows {
			k.m = make(map[ackKey]struct{})
		}
		k.m[key] = struct{}{}
	}
}

func (k *knownRows) drop(key ackKey) {
	if k == nil {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.m, key)
}

// reset forgets every key (a group or queue was deleted).
func (k *knownRows) reset() {
	if k == nil {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.m = nil
}

// staleRetries bounds how often a call runs again after errStaleKnown: each
// run drops the stale keys it met, so a second run creates them.
const staleRetries = 3

// inKnownSession runs attempt, one transaction that skips creating the
// consumer rows in s.known, as inSession does, and again (up to
// staleRetries times) when it failed with errStaleKnown: a row known was
// deleted meanwhile (a group's deletion, retention), and the next run
// creates it. attempt must start afresh each run. It returns the last
// run's error.
func (s *Store) inKnownSession(ctx context.Context, attempt func(*session) error) error {
	for try := 0; ; try++ {
		err := s.inSession(ctx, attempt)
		if !errors.Is(err, errStaleKnown) || try >= staleRetries {
			return err
		}
	}
}
