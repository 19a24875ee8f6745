package rules

import "time"

// Bisection is a consumer row's poison isolation (SPEC.md §4): a consumer
// that crashes mid-batch may have handled, but not acked, the messages
// before the one that killed it, so an expired lease over several unacked
// messages charges none of them; the group's next deliveries in that
// partition hold at most half the expired span, down to one message, until
// the cursor passes the expired range. Only a single-message span that
// expires is charged one failed delivery. The zero value is "not
// bisecting". It is decided under the consumer row lock and stored in the
// row; Expire and Deliver are its only transitions.
type Bisection struct {
	// Active: an expired range is being bisected.
	Active bool
	// To is the last offset of the expired range (the furthest lease end of
	// the expired spans): deliveries stay at or below it, and the
	// bisection ends once the cursor reaches it.
	To int64
	// Hot is the last offset of the span that expired last: the message
	// that crashed its consumer is at or below it. Deliveries below it stay
	// at or below it and never grow.
	Hot int64
	// Size is the most messages the next delivery may hold (>= 1).
	Size int64
	// Cap is half the largest span that expired in the range: once the
	// cursor has passed Hot, each acked delivery lets Size grow back, twice
	// as large, never past Cap.
	Cap int64
	// Mark is the cursor at the last expiry or bisected delivery: a cursor
	// above it at the next pop means the last delivery was acked.
	Mark int64
	// Since is when the range's first expiry was settled (PostgreSQL's
	// clock): the stall Deliver reports when the range is passed runs from
	// it.
	Since time.Time
}

// Expire settles an expired lease whose unacked span is the offsets from
// through to (the first unacked message, the lease's end), with cursor the
// consumer row's cursor and now PostgreSQL's clock. A span of several
// messages charges none (bisected true): the next delivery holds at most
// half of it (at least one), and the bisection's range reaches to at
// least to. A single-message span is charged (charge true): the caller
// counts one failed delivery of from (error text "lease expired") and
// dead-letters it past retryLimit, then sets Mark to the cursor it leaves.
// An empty span (from > to) does nothing.
func (b *Bisection) Expire(cursor, from, to int64, now time.Time) (charge, bisected bool) {
	n := to - from + 1
	switch {
	case n <= 0:
		return false, false
	case n == 1:
		if b.Active {
			b.Hot, b.Size, b.Mark = to, 1, cursor
		}
		return true, false
	}
	half := n / 2
	if !b.Active {
		*b = Bisection{Active: true, To: to, Cap: half, Since: now}
	}
	b.To, b.Hot, b.Cap = max(b.To, to), to, max(b.Cap, half)
	b.Size, b.Mark = half, cursor
	return false, true
}

// Deliver decides how many messages a pop at cursor may deliver, at most
// batch: batch when no bisection is active; else at most Size and no
// further than Hot while the cursor is below it, To after. A cursor at or
// past Hot and above Mark (the last delivery was acked) doubles Size first,
// up to Cap; Mark becomes cursor. A cursor at or
// past To ends the bisection (b becomes the zero value) and stall is how
// long it held the partition, from Since to now. changed says b must be
// written back.
func (b *Bisection) Deliver(cursor int64, batch int, now time.Time) (limit int, stall time.Duration, changed bool) {
	if !b.Active {
		return batch, 0, false
	}
	if cursor >= b.To {
		stall = max(now.Sub(b.Since), 0)
		*b = Bisection{}
		return batch, stall, true
	}
	end := b.To
	switch {
	case cursor < b.Hot:
		end = b.Hot
	case cursor > b.Mark:
		b.Size = min(2*b.Size, b.Cap)
	}
	b.Size = max(b.Size, 1)
	b.Mark = cursor
	return int(min(int64(batch), b.Size, end-cursor)), 0, true
}
