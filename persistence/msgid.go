package persistence

import (
	"encoding/binary"
	"time"

	"github.com/google/uuid"
	"github.com/zeebo/xxh3"

	queen "github.com/queen-mq/queen-go"
)

// messageID is the id of the message at offset off of partition pid whose
// segment was stamped at (segments.created_at): a UUIDv7 (SPEC.md §2)
// whose 48-bit time is at's Unix milliseconds and whose 74 other bits are
// taken from the XXH3-128 of pid and off (16 bytes, then 8 big-endian).
// From layout 3 (migration 0022) segments store no message ids: every
// reader derives them here from what the segment row holds, and the push
// derives the same id for its reply, so an id costs no byte of WAL or
// database. Ids of one partition differ (offsets differ); two partitions'
// ids collide with the odds of two random UUIDv7s in one millisecond.
func messageID(pid uuid.UUID, off int64, at time.Time) uuid.UUID {
	var k [24]byte
	copy(k[:16], pid[:])
	binary.BigEndian.PutUint64(k[16:], uint64(off))
	h := xxh3.Hash128(k[:]).Bytes()
	var id uuid.UUID
	ms := uint64(at.UnixMilli())
	id[0], id[1], id[2] = byte(ms>>40), byte(ms>>32), byte(ms>>24)
	id[3], id[4], id[5] = byte(ms>>16), byte(ms>>8), byte(ms)
	copy(id[6:], h[6:])
	id[6] = 0x70 | id[6]&0x0f // version 7
	id[8] = 0x80 | id[8]&0x3f // variant 10
	return id
}

// originalID is the message id a duplicate names for its original at offset
// off of partition pid, stamped at, from what bundle_probe or dedup_inspect
// read of its covering segment (stored): NULL (nil) when the segment is gone
// (retention), which SPEC.md §3 answers with the zero id; 16 bytes when the
// segment stores its ids (written before layout 3); empty when it derives
// them (messageID).
func originalID(pid uuid.UUID, off int64, at time.Time, stored []byte) uuid.UUID {
	switch {
	case stored == nil:
		return uuid.UUID(queen.ZeroUUID)
	case len(stored) == 16:
		return uuid.UUID(stored)
	default:
		return messageID(pid, off, at)
	}
}
