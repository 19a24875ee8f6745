package consumers

import (
	"sort"
	"strconv"

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

// Auditor checks the groups' records against the stored messages
// (fed one by one to stored), the dead letters and the final cursors.
type Auditor struct {
	groups     []*group
	parts      []string
	partIdx    map[string]int
	ratio      float64
	retryLimit int
	// failMode is the consumers' Config.FailMode ("": the error text of
	// dead letters is not checked).
	failMode string
	complete bool
	found    *report.Findings
	// lastStored is each partition's highest stored offset (-1: none).
	lastStored []int64
	dlq        []map[uint64]*dlqSeen
	ar         report.ConsumeAudit
	perGroup   []groupAudit
}

// groupAudit is one group's share of the audit, for the report.
type groupAudit struct {
	messages, poison int64
}

func newAuditor(groups []*group, parts []string, ratio float64, retryLimit int, complete bool, dead []persistence.StoredDeadLetter) *Auditor {
	a := &Auditor{groups: groups, parts: parts, partIdx: map[string]int{}, ratio: ratio, retryLimit: retryLimit,
		complete: complete, found: report.NewFindings(), lastStored: make([]int64, len(parts)), dlq: make([]map[uint64]*dlqSeen, len(groups)),
		perGroup: make([]groupAudit, len(groups))}
	a.ar.Complete = complete
	for i, p := range parts {
		a.partIdx[p] = i
		a.lastStored[i] = -1
	}
	gi := map[string]int{}
	for i, g := range groups {
		gi[g.name] = i
		a.dlq[i] = map[uint64]*dlqSeen{}
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
	return a
}

// stored checks one stored message against every group.
func (a *Auditor) Stored(m *persistence.StoredMessage) {
	p, ok := a.partIdx[m.Partition]
	if !ok || m.Offset < 0 || m.Offset > txnid.SeqMask {
		return // the storage audit reports it (unknown_stored)
	}
	a.lastStored[p] = max(a.lastStored[p], m.Offset)
	key := txnid.MakeKey(p, uint64(m.Offset))
	poison := txnid.IsPoison(m.TransactionID, a.ratio)
	a.ar.Messages++
	if poison {
		a.ar.Poison++
	}
	want := a.retryLimit + 1
	fp := txnid.Fingerprint(m.TransactionID)
	for gi, g := range a.groups {
		a.perGroup[gi].messages++
		if poison {
			a.perGroup[gi].poison++
		}
		e := g.m.get(key)
		if e.popped > 0 {
			e.seen = true
			g.m.put(key, e)
			if e.txn != fp {
				a.found.Add(report.IssueWrongDelivery, "group %s: %s offset %d stores transactionId %q, but the message delivered there had another one",
					g.name, m.Partition, m.Offset, m.TransactionID)
			}
		}
		d := a.dlq[gi][key]
		if d != nil {
			d.seen = true
			if d.txn != m.TransactionID {
				a.found.Add(report.IssueDLQUnexpected, "group %s: the dead letter at %s offset %d holds transactionId %q, but the stored message is %q",
					g.name, m.Partition, m.Offset, d.txn, m.TransactionID)
			}
		}
		explained := int(e.unknown) + int(e.refused)
		// A pop that got no answer may have leased a span nobody handled;
		// its expiry counts a failed delivery of the span's first message.
		lostPops := g.lostPops.Load() > 0
		if d, ok := g.retryMismatch[key]; ok && explained == 0 && !(d.over && lostPops) {
			a.found.Add(report.IssueWrongRetryCount, "%s", d.desc)
		}
		if e.unknown > 0 && e.handled > 1 {
			a.ar.RedeliveredAfterLostAck++
		}
		if poison {
			switch {
			case d == nil:
				if a.complete {
					a.found.Add(report.IssueDLQMissing, "poison message %s is not in the DLQ (handled %d times, charged %d, answered dead_lettered %d times)", msgName(g, m), e.handled, e.charged, e.dead)
				}
			case d.n > 1:
				a.found.Add(report.IssueDLQTwice, "poison message %s is in the DLQ %d times", msgName(g, m), d.n)
			case d.attempts != want:
				a.found.Add(report.IssueDLQAttempts, "poison message %s is in the DLQ with attempts %d, want %d (retryLimit %d + 1)", msgName(g, m), d.attempts, want, a.retryLimit)
			case !a.dlqErrorOK(d.err):
				a.found.Add(report.IssueDLQError, "poison message %s is in the DLQ with error %q (fail mode %s)", msgName(g, m), d.err, a.failMode)
			}
			if int(e.charged) > want+explained || (a.complete && int(e.charged) < want && !(lostPops && d != nil)) {
				a.found.Add(report.IssuePoisonDeliveries, "poison message %s was charged %d failed deliveries (handled %d times), want %d (retryLimit %d + 1)", msgName(g, m), e.charged, e.handled, want, a.retryLimit)
			}
			if e.acked > 0 {
				a.found.Add(report.IssueAckUnexpected, "poison message %s was answered acked to a completed ack it was never sent", msgName(g, m))
			}
			continue
		}
		if d != nil {
			a.found.Add(report.IssueDLQUnexpected, "%s is not poison but is in the DLQ %d times (attempts %d)", msgName(g, m), d.n, d.attempts)
		}
		switch {
		case e.acked > 1:
			a.found.Add(report.IssueAckedTwice, "%s was answered acked %d times", msgName(g, m), e.acked)
		case e.acked == 0 && e.unknown > 0:
			a.ar.AckOutcomeUnknown++
		case e.acked == 0 && a.complete && e.handled == 0:
			a.found.Add(report.IssueNeverDelivered, "%s was never handled (delivered %d times)", msgName(g, m), e.popped)
		case e.acked == 0 && a.complete && e.refused == 0:
			a.found.Add(report.IssueNotAcked, "%s was handled %d times but never answered acked (stale %d)", msgName(g, m), e.handled, e.stale)
		}
		// A handling in a batch whose lease was abandoned (FailCrashBatch)
		// is delivered again by design.
		if int(e.handled) > 1+explained+int(e.abandoned) {
			a.found.Add(report.IssueRedelivered, "%s was handled %d times, though it was answered acked %d times and no ack of it was lost or refused", msgName(g, m), e.handled, e.acked)
		}
	}
}

// dlqErrorOK reports whether a poison message's dead letter carries the
// error text its fail mode gives: the handler's with FailNack (or "lease
// expired" when a lost ack or pop left the lease to expire), "lease
// expired" with FailCrash and FailCrashBatch.
func (a *Auditor) dlqErrorOK(text string) bool {
	switch a.failMode {
	case txnid.FailNack:
		return text == txnid.PoisonError || text == persistence.LeaseExpiredError
	case txnid.FailCrash, txnid.FailCrashBatch:
		return text == persistence.LeaseExpiredError
	}
	return true
}

// finish checks what the stored messages did not reach (deliveries and
// dead letters of offsets that are not stored) and the final cursors, and
// returns the audit.
func (a *Auditor) Finish(cursors []persistence.Cursor) *report.ConsumeAudit {
	for gi, g := range a.groups {
		var keys []uint64
		for key, e := range g.m.all() {
			if e.popped > 0 && !e.seen {
				keys = append(keys, key)
			}
		}
		sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
		for _, key := range keys {
			e := g.m.get(key)
			a.found.Add(report.IssueDeliveredUnknown, "group %s was delivered %s offset %d (%d times), which is not stored", g.name, a.parts[txnid.KeyPart(key)], txnid.KeySeq(key), e.popped)
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
			a.found.Add(report.IssueDLQUnexpected, "group %s has a dead letter at %s offset %d (transactionId %q), which is not stored", g.name, a.parts[txnid.KeyPart(key)], txnid.KeySeq(key), d.txn)
		}
		a.found.Merge(g.issues)
		g.mu.Lock()
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

// msgName is "group partition/offset (transactionId)", for examples.
func msgName(g *group, m *persistence.StoredMessage) string {
	return g.name + " " + m.Partition + "/" + strconv.FormatInt(m.Offset, 10) + " (" + m.TransactionID + ")"
}
