package consumers

import (
	"sort"
	"strconv"
	"sync"
	"time"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/loadtest/report"
	"github.com/queen-mq/queen-go/loadtest/txnid"
	"github.com/queen-mq/queen-go/persistence"
)

// dlqSeen is what the DLQ holds for one (group, message).
type dlqSeen struct {
	n, attempts int
	txn, err    string
	seen        bool
}

// keptPoison is a poison message's record, checked against the dead
// letters at the end (Finish): passed says every group's cursor had passed
// it when its chunk was released (its dead letter must exist), expirable
// that retention may have deleted it before then (expirable).
type keptPoison struct {
	e                 consEntry
	passed, expirable bool
}

// keptPoisonBytes is about what one keptPoison costs in its map.
const keptPoisonBytes = 48

// Auditor checks the groups' records against the stored messages (fed one
// by one, in offset order per partition, to Stored, as the storage audit
// reads them), the cursors, the dead letters and the final cursors.
//
// It checks as the run goes: Forget, given the cursors, checks every
// record of the offsets that every group's cursor has passed and that
// Stored has seen, and releases their chunks, so the records hold the
// backlog (stored or delivered, not yet passed by every group), not the
// run. A poison message's record is kept (16 bytes and a map entry) until
// Finish, which reads the dead letters once. Stored, Forget and Finish may
// run on different goroutines.
type Auditor struct {
	mu         sync.Mutex
	groups     []*group
	parts      []string
	partIdx    map[string]int
	ratio      float64
	retryLimit int
	// failMode is the consumers' Config.FailMode ("": the error text of
	// dead letters is not checked).
	failMode string
	// retention is the queue's retentionSeconds (0: keep): a message
	// passed unacked at least retention after it was stored may have been
	// deleted before the group got to it (expirable).
	retention time.Duration
	complete  bool
	found     *report.Findings
	// lastStored is each partition's highest stored offset seen (-1: none);
	// checked the highest offset whose records are checked (-1: none).
	lastStored, checked []int64
	// oldest is the oldest created_at (Unix ns) of the stored messages of
	// each chunk (chunk key as in entries) not yet released.
	oldest   map[uint64]int64
	dlq      []map[uint64]*dlqSeen
	ar       report.ConsumeAudit
	perGroup []groupAudit
}

// groupAudit is one group's share of the audit, for the report.
type groupAudit struct {
	messages, poison, expired int64
}

func newAuditor(groups []*group, parts []string, ratio float64, retryLimit int) *Auditor {
	a := &Auditor{groups: groups, parts: parts, partIdx: map[string]int{}, ratio: ratio, retryLimit: retryLimit,
		found: report.NewFindings(), lastStored: make([]int64, len(parts)), checked: make([]int64, len(parts)),
		oldest: map[uint64]int64{}, dlq: make([]map[uint64]*dlqSeen, len(groups)), perGroup: make([]groupAudit, len(groups))}
	for i, p := range parts {
		a.partIdx[p] = i
		a.lastStored[i] = -1
		a.checked[i] = -1
	}
	for i := range groups {
		a.dlq[i] = map[uint64]*dlqSeen{}
	}
	return a
}

// deadLetters books the dead letters (read once, at the end).
func (a *Auditor) deadLetters(dead []persistence.StoredDeadLetter) {
	gi := map[string]int{}
	for i, g := range a.groups {
		gi[g.name] = i
	}
	for i := range dead {
		d := &dead[i]
		g, okG := gi[d.ConsumerGroup]
		p, okP := a.partIdx[d.Partition]
		if !okG || !okP || d.Offset < 0 || d.Offset > txnid.SeqMask {
			a.found.Add(report.IssueDLQUnexpected, "a dead letter of group %q, partition %q, offset %d (transactionId %q) is of no group or partition of this run",
				d.ConsumerGroup, d.Partition, d.Offset, d.TransactionID)
			continue
		}
		a.ar.DeadLetters++
		key := txnid.MakeKey(p, uint64(d.Offset))
		s := a.dlq[g][key]
		if s == nil {
			s = &dlqSeen{attempts: d.Attempts, txn: d.TransactionID, err: d.Error}
			a.dlq[g][key] = s
		}
		s.n++
	}
}

// Stored books one stored message in every group's record (the storage
// audit feeds each stored message once, in offset order per partition):
// its transactionId's fingerprint, whether it is poison, and that it is
// stored; a delivery of it with another transactionId, before or after, is
// a finding.
func (a *Auditor) Stored(m *persistence.StoredMessage) {
	p, ok := a.partIdx[m.Partition]
	if !ok || m.Offset < 0 || m.Offset > txnid.SeqMask {
		return // the storage audit reports it (unknown_stored)
	}
	key := txnid.MakeKey(p, uint64(m.Offset))
	a.mu.Lock()
	defer a.mu.Unlock()
	g0 := a.groups[0]
	g0.mu.Lock()
	again := g0.m.get(key).seen
	g0.mu.Unlock()
	if m.Offset <= a.checked[p] || again {
		return // read again (a storage audit's recount): booked already
	}
	a.lastStored[p] = max(a.lastStored[p], m.Offset)
	if at := m.CreatedAt.UnixNano(); !m.CreatedAt.IsZero() {
		if o, ok := a.oldest[key>>entryChunkBits]; !ok || at < o {
			a.oldest[key>>entryChunkBits] = at
		}
	}
	poison := txnid.IsPoison(m.TransactionID, a.ratio)
	a.ar.Messages++
	if poison {
		a.ar.Poison++
	}
	fp := txnid.Fingerprint(m.TransactionID)
	for gi, g := range a.groups {
		a.perGroup[gi].messages++
		if poison {
			a.perGroup[gi].poison++
		}
		g.mu.Lock()
		e := g.m.get(key)
		if e.popped > 0 && e.txn != fp {
			g.issues.Add(report.IssueWrongDelivery, "group %s: %s offset %d stores transactionId %q, but the message delivered there had another one",
				g.name, m.Partition, m.Offset, m.TransactionID)
		}
		e.txn, e.seen, e.poison = fp, true, poison
		g.m.put(key, e)
		g.mu.Unlock()
	}
}

// Forget checks the records of every offset that every group's cursor
// (cursors, read at `at`) has passed and that Stored has seen, and releases
// the chunks every group has passed. The caller makes sure that no answer
// to a pop or ack sent before the cursors were read is still to be booked
// (Phase's audit loop).
func (a *Auditor) Forget(cursors []persistence.Cursor, at time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.forget(passedBy(a.groups, a.partIdx, cursors), at, true)
}

// passedBy is, per partition, the lowest cursor over the groups (-1: a
// group has none there).
func passedBy(groups []*group, partIdx map[string]int, cursors []persistence.Cursor) []int64 {
	gi := map[string]int{}
	for i, g := range groups {
		gi[g.name] = i
	}
	cur := make([][]int64, len(partIdx))
	for p := range cur {
		cur[p] = make([]int64, len(groups))
		for g := range cur[p] {
			cur[p][g] = -1
		}
	}
	for _, c := range cursors {
		g, okG := gi[c.ConsumerGroup]
		p, okP := partIdx[c.Partition]
		if okG && okP {
			cur[p][g] = c.Cursor
		}
	}
	out := make([]int64, len(partIdx))
	for p := range cur {
		out[p] = -1
		if len(cur[p]) > 0 {
			out[p] = cur[p][0]
			for _, c := range cur[p][1:] {
				out[p] = min(out[p], c)
			}
		}
	}
	return out
}

// forget checks, per partition, the offsets after checked up to
// min(upTo, lastStored) and releases the chunks wholly at or below it;
// passed says every group's cursor is past them (a message never acked is
// then a finding, or expired). Under mu.
func (a *Auditor) forget(upTo []int64, at time.Time, passed bool) {
	for p := range a.parts {
		to := min(upTo[p], a.lastStored[p])
		if to <= a.checked[p] {
			continue
		}
		for off := a.checked[p] + 1; off <= to; off++ {
			key := txnid.MakeKey(p, uint64(off))
			expirable := a.expirable(key, at)
			for gi := range a.groups {
				a.check(gi, key, passed, expirable)
			}
		}
		// The chunks wholly at or below to.
		from := uint64(a.checked[p]+1) >> entryChunkBits
		through := uint64(to+1) >> entryChunkBits
		for c := from; c < through; c++ {
			ck := txnid.MakeKey(p, c<<entryChunkBits) >> entryChunkBits
			for _, g := range a.groups {
				g.mu.Lock()
				g.m.release(ck)
				g.mu.Unlock()
			}
			delete(a.oldest, ck)
		}
		a.checked[p] = to
	}
}

// expirable says whether retention may have deleted the message of key
// before `at`: the oldest stored message of its chunk is at least
// retention older than at (never without retention).
func (a *Auditor) expirable(key uint64, at time.Time) bool {
	if a.retention <= 0 {
		return false
	}
	o, ok := a.oldest[key>>entryChunkBits]
	return ok && at.UnixNano()-o >= int64(a.retention)
}

// check checks one group's record of one message: passed, every group's
// cursor is past it; expirable, retention may have deleted it before the
// group got to it. A poison message's record is kept for the dead letters
// (finishPoison). Under mu.
func (a *Auditor) check(gi int, key uint64, passed, expirable bool) {
	g := a.groups[gi]
	g.mu.Lock()
	e := g.m.get(key)
	mismatch, hasMismatch := g.retryMismatch[key]
	delete(g.retryMismatch, key)
	if e.poison && e.seen {
		g.kept[key] = keptPoison{e: e, passed: passed, expirable: expirable}
		g.m.mapped.Add(keptPoisonBytes)
	}
	g.mu.Unlock()
	if e == (consEntry{}) {
		return // not stored where the storage audit could read it, nor delivered
	}
	name := a.keyName(g, key)
	if !e.seen {
		if e.popped > 0 {
			a.found.Add(report.IssueDeliveredUnknown, "group %s was delivered %s (%d times), which the storage audit did not read stored", g.name, name, e.popped)
		}
		return
	}
	explained := int(e.unknown) + int(e.refused)
	// A pop that got no answer may have leased a span nobody handled;
	// its expiry counts a failed delivery of the span's first message.
	lostPops := g.lostPops.Load() > 0
	if hasMismatch && explained == 0 && !(mismatch.over && lostPops) {
		a.found.Add(report.IssueWrongRetryCount, "%s", mismatch.desc)
	}
	if e.unknown > 0 && e.handled > 1 {
		a.ar.RedeliveredAfterLostAck++
	}
	if e.poison {
		return // finishPoison
	}
	switch {
	case e.acked > 1:
		a.found.Add(report.IssueAckedTwice, "%s was answered acked %d times", name, e.acked)
	case e.acked == 0 && e.unknown > 0:
		a.ar.AckOutcomeUnknown++
	case e.acked == 0 && passed && expirable && (e.handled == 0 || e.refused == 0):
		a.expired(gi)
	case e.acked == 0 && passed && e.handled == 0:
		a.found.Add(report.IssueNeverDelivered, "%s was never handled (delivered %d times)", name, e.popped)
	case e.acked == 0 && passed && e.refused == 0:
		a.found.Add(report.IssueNotAcked, "%s was handled %d times but never answered acked (stale %d)", name, e.handled, e.stale)
	}
	// A handling in a batch whose lease was abandoned (FailCrashBatch)
	// is delivered again by design.
	if int(e.handled) > 1+explained+int(e.abandoned) {
		a.found.Add(report.IssueRedelivered, "%s was handled %d times, though it was answered acked %d times and no ack of it was lost or refused", name, e.handled, e.acked)
	}
}

// expired counts a message retention deleted before group gi acked it.
func (a *Auditor) expired(gi int) {
	a.ar.ExpiredBeforeAcked++
	a.perGroup[gi].expired++
}

// finishPoison checks the kept poison records of group gi against its dead
// letters. Under mu.
func (a *Auditor) finishPoison(gi int) {
	g := a.groups[gi]
	want := a.retryLimit + 1
	lostPops := g.lostPops.Load() > 0
	keys := make([]uint64, 0, len(g.kept))
	for key := range g.kept {
		keys = append(keys, key)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	for _, key := range keys {
		k := g.kept[key]
		e := k.e
		name := a.keyName(g, key)
		explained := int(e.unknown) + int(e.refused)
		d := a.dlq[gi][key]
		if d != nil {
			d.seen = true
			if txnid.Fingerprint(d.txn) != e.txn {
				a.found.Add(report.IssueDLQUnexpected, "group %s: the dead letter at %s holds transactionId %q, but the stored message has another one", g.name, name, d.txn)
			}
		}
		switch {
		case d == nil && k.passed && k.expirable:
			a.expired(gi)
			continue
		case d == nil:
			if k.passed {
				a.found.Add(report.IssueDLQMissing, "poison message %s is not in the DLQ (handled %d times, charged %d, answered dead_lettered %d times)", name, e.handled, e.charged, e.dead)
			}
		case d.n > 1:
			a.found.Add(report.IssueDLQTwice, "poison message %s is in the DLQ %d times", name, d.n)
		case d.attempts != want:
			a.found.Add(report.IssueDLQAttempts, "poison message %s is in the DLQ with attempts %d, want %d (retryLimit %d + 1)", name, d.attempts, want, a.retryLimit)
		case !a.dlqErrorOK(d.err):
			a.found.Add(report.IssueDLQError, "poison message %s is in the DLQ with error %q (fail mode %s)", name, d.err, a.failMode)
		}
		if int(e.charged) > want+explained || (k.passed && int(e.charged) < want && !(lostPops && d != nil)) {
			a.found.Add(report.IssuePoisonDeliveries, "poison message %s was charged %d failed deliveries (handled %d times), want %d (retryLimit %d + 1)", name, e.charged, e.handled, want, a.retryLimit)
		}
		if e.acked > 0 {
			a.found.Add(report.IssueAckUnexpected, "poison message %s was answered acked to a completed ack it was never sent", name)
		}
	}
	keys = keys[:0]
	for key, d := range a.dlq[gi] {
		if !d.seen {
			keys = append(keys, key)
		}
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	for _, key := range keys {
		d := a.dlq[gi][key]
		what := "which is not stored"
		if int64(txnid.KeySeq(key)) <= a.lastStored[txnid.KeyPart(key)] {
			what = "which is not a poison message (or not stored)"
		}
		a.found.Add(report.IssueDLQUnexpected, "group %s has a dead letter at %s offset %d (transactionId %q, attempts %d), %s", g.name, a.parts[txnid.KeyPart(key)], txnid.KeySeq(key), d.txn, d.attempts, what)
	}
}

// dlqErrorOK reports whether a poison message's dead letter carries the
// error text its fail mode gives: the handler's with FailNack (or "lease
// expired" when a lost ack or pop left the lease to expire), "lease
// expired" with FailCrash and FailCrashBatch.
func (a *Auditor) dlqErrorOK(text string) bool {
	switch a.failMode {
	case txnid.FailNack:
		return text == txnid.PoisonError || text == queen.LeaseExpiredError
	case txnid.FailCrash, txnid.FailCrashBatch:
		return text == queen.LeaseExpiredError
	}
	return true
}

// finish checks what Forget has not (complete: every group was to reach
// the end), the poison messages against the dead letters, what the stored
// messages did not reach (deliveries of offsets that are not stored) and
// the final cursors, and returns the audit. The consumers have stopped.
func (a *Auditor) finish(complete bool, dead []persistence.StoredDeadLetter, cursors []persistence.Cursor, now time.Time) *report.ConsumeAudit {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.complete = complete
	a.ar.Complete = complete
	a.deadLetters(dead)
	// Complete: every group was to reach every partition's end, so every
	// message is judged as passed (a drain that fell short is a finding).
	upTo := make([]int64, len(a.parts))
	for p := range upTo {
		upTo[p] = txnid.SeqMask
	}
	a.forget(upTo, now, complete)
	for gi, g := range a.groups {
		var keys []uint64
		for key, e := range g.m.all() {
			if e.popped > 0 && !e.seen && int64(txnid.KeySeq(key)) > a.checked[txnid.KeyPart(key)] {
				keys = append(keys, key)
			}
		}
		sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
		for _, key := range keys {
			e := g.m.get(key)
			a.found.Add(report.IssueDeliveredUnknown, "group %s was delivered %s offset %d (%d times), which is not stored", g.name, a.parts[txnid.KeyPart(key)], txnid.KeySeq(key), e.popped)
		}
		a.finishPoison(gi)
		g.mu.Lock()
		a.found.Merge(g.issues)
		a.ar.AckAfterLease += g.ackAfterLease
		g.mu.Unlock()
	}

	type gp struct{ g, p int }
	cur := map[gp]persistence.Cursor{}
	gi := map[string]int{}
	for i, g := range a.groups {
		gi[g.name] = i
	}
	for _, c := range cursors {
		g, okG := gi[c.ConsumerGroup]
		p, okP := a.partIdx[c.Partition]
		if okG && okP {
			cur[gp{g, p}] = c
		}
	}
	for g := range a.groups {
		for p, last := range a.lastStored {
			c, ok := cur[gp{g, p}]
			switch {
			case !ok && last >= 0 && a.complete:
				a.found.Add(report.IssueCursorWrong, "group %s has no cursor in partition %s (last offset %d)", a.groups[g].name, a.parts[p], last)
			case !ok:
			case c.Cursor > last || c.Cursor > c.LastOffset:
				a.found.Add(report.IssueCursorWrong, "group %s's cursor in partition %s is %d, past the last stored offset %d (allocator %d)", a.groups[g].name, a.parts[p], c.Cursor, last, c.LastOffset)
			case a.complete && c.Cursor != last:
				a.found.Add(report.IssueCursorWrong, "group %s's cursor in partition %s is %d, the last stored offset is %d", a.groups[g].name, a.parts[p], c.Cursor, last)
			}
		}
	}
	a.ar.Issues = a.found.Counts
	a.ar.Examples = a.found.Examples()
	a.ar.Passed = a.found.Total() == 0
	return &a.ar
}

// keyName is "group partition/offset", for examples.
func (a *Auditor) keyName(g *group, key uint64) string {
	return g.name + " " + a.parts[txnid.KeyPart(key)] + "/" + strconv.FormatUint(txnid.KeySeq(key), 10)
}
