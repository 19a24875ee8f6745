package audit

// pendingSet holds the message ids a ledger still awaits, keyed by sequence
// number. Almost every entry is resolved by the next audit pass, and
// sequence numbers are sent in order, so the live entries sit in a short
// run of sequence numbers: they are kept in a ring indexed by seq (an array
// access, where a Go map cost a cache miss or two per lookup, measured at
// about 6 % of an embedded run's CPU). An entry that falls more than the
// ring's maximum behind the newest (an id stored but only ever answered
// failed, which no answer will resolve) moves to a small map.
type pendingSet struct {
	slots []pendSlot // len a power of two; slot of seq: seq & (len-1)
	base  uint64     // every entry of the ring has a seq in [base, base+len)
	n     int        // entries in the ring
	over  map[uint64]pendingID
}

type pendSlot struct {
	p       pendingID
	present bool
}

const (
	pendMinSlots = 1 << 10
	// pendMaxSlots bounds one ring: 128 Ki slots of 19 bytes, 2.4 MiB.
	pendMaxSlots = 1 << 17
)

func (s *pendingSet) get(seq uint64) (pendingID, bool) {
	if seq < s.base || seq-s.base >= uint64(len(s.slots)) {
		p, ok := s.over[seq]
		return p, ok
	}
	sl := &s.slots[seq&uint64(len(s.slots)-1)]
	return sl.p, sl.present
}

func (s *pendingSet) put(seq uint64, p pendingID) {
	if seq < s.base {
		s.putOver(seq, p)
		return
	}
	if s.n == 0 {
		s.base = seq
	}
	for seq-s.base >= uint64(len(s.slots)) {
		if len(s.slots) < pendMaxSlots {
			s.grow()
			continue
		}
		// Full: the oldest entry moves to the map.
		sl := &s.slots[s.base&uint64(len(s.slots)-1)]
		if sl.present {
			s.putOver(s.base, sl.p)
			*sl = pendSlot{}
			s.n--
		}
		s.base++
		if s.n == 0 {
			s.base = seq
		}
	}
	sl := &s.slots[seq&uint64(len(s.slots)-1)]
	if !sl.present {
		s.n++
	}
	*sl = pendSlot{p: p, present: true}
}

func (s *pendingSet) putOver(seq uint64, p pendingID) {
	if s.over == nil {
		s.over = map[uint64]pendingID{}
	}
	s.over[seq] = p
}

func (s *pendingSet) del(seq uint64) {
	if seq < s.base || seq-s.base >= uint64(len(s.slots)) {
		delete(s.over, seq)
		return
	}
	mask := uint64(len(s.slots) - 1)
	sl := &s.slots[seq&mask]
	if !sl.present {
		return
	}
	*sl = pendSlot{}
	s.n--
	// The ring's start follows its oldest entry.
	for s.n > 0 && !s.slots[s.base&mask].present {
		s.base++
	}
}

// grow doubles the ring (from pendMinSlots), keeping every entry.
func (s *pendingSet) grow() {
	slots := make([]pendSlot, max(pendMinSlots, 2*len(s.slots)))
	if s.n > 0 {
		old := uint64(len(s.slots) - 1)
		mask := uint64(len(slots) - 1)
		for seq := s.base; seq < s.base+uint64(len(s.slots)); seq++ {
			if sl := s.slots[seq&old]; sl.present {
				slots[seq&mask] = sl
			}
		}
	}
	s.slots = slots
}

// len is the number of entries.
func (s *pendingSet) len() int { return s.n + len(s.over) }

// bytes is the set's memory: the ring's slots and about 48 bytes per map
// entry.
func (s *pendingSet) bytes() int64 {
	return int64(len(s.slots))*int64(19) + int64(len(s.over))*48
}
