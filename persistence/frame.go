package persistence

import (
	"encoding/binary"
	"errors"

	"github.com/google/uuid"
)

// Frame is one message inside a segment. Frames are packed back to back in
// segments.frames; their message ids live beside them in segments.message_ids
// (16 bytes per frame, frame order), so a duplicate's original id is sliced
// out without reading any frame.
//
// Packed layout of one frame (all lengths unsigned varints):
//
//	len(transactionId) transactionId  traceFlag [len(traceId) traceId]  len(payload) payload
//
// traceFlag is 0 for no trace id, 1 when one follows.
type Frame struct {
	MessageID     uuid.UUID
	TransactionID string
	TraceID       *string
	Payload       []byte
}

// AppendFrame appends the packed form of f (without its message id) to dst.
func AppendFrame(dst []byte, txn string, trace *string, payload []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(txn)))
	dst = append(dst, txn...)
	if trace == nil {
		dst = append(dst, 0)
	} else {
		dst = append(dst, 1)
		dst = binary.AppendUvarint(dst, uint64(len(*trace)))
		dst = append(dst, *trace...)
	}
	dst = binary.AppendUvarint(dst, uint64(len(payload)))
	return append(dst, payload...)
}

// ErrCorruptSegment is returned when a segment's bytes do not decode.
var ErrCorruptSegment = errors.New("persistence: corrupt segment")

// DecodeFrames unpacks a segment's frames and message ids.
func DecodeFrames(messageIDs, frames []byte) ([]Frame, error) {
	if len(messageIDs)%16 != 0 {
		return nil, ErrCorruptSegment
	}
	n := len(messageIDs) / 16
	out := make([]Frame, 0, n)
	b := frames
	str := func() (string, bool) {
		l, k := binary.Uvarint(b)
		if k <= 0 || uint64(len(b)-k) < l {
			return "", false
		}
		s := string(b[k : k+int(l)])
		b = b[k+int(l):]
		return s, true
	}
	for i := 0; i < n; i++ {
		var f Frame
		copy(f.MessageID[:], messageIDs[i*16:])
		var ok bool
		if f.TransactionID, ok = str(); !ok || len(b) == 0 {
			return nil, ErrCorruptSegment
		}
		flag := b[0]
		b = b[1:]
		if flag == 1 {
			t, ok := str()
			if !ok {
				return nil, ErrCorruptSegment
			}
			f.TraceID = &t
		}
		p, ok := str()
		if !ok {
			return nil, ErrCorruptSegment
		}
		f.Payload = []byte(p)
		out = append(out, f)
	}
	if len(b) != 0 {
		return nil, ErrCorruptSegment
	}
	return out, nil
}

// FramePayload returns the payload of frame k (0-based) of a segment's
// packed frames, skipping the frames before it without copying them; the
// result aliases frames. A k past the last frame or bytes that do not
// decode are ErrCorruptSegment.
func FramePayload(frames []byte, k int) ([]byte, error) {
	b := frames
	skip := func() ([]byte, bool) {
		l, n := binary.Uvarint(b)
		if n <= 0 || uint64(len(b)-n) < l {
			return nil, false
		}
		v := b[n : n+int(l)]
		b = b[n+int(l):]
		return v, true
	}
	for i := 0; ; i++ {
		if _, ok := skip(); !ok || len(b) == 0 { // transactionId, then the trace flag
			return nil, ErrCorruptSegment
		}
		flag := b[0]
		b = b[1:]
		if flag == 1 {
			if _, ok := skip(); !ok {
				return nil, ErrCorruptSegment
			}
		}
		p, ok := skip()
		if !ok {
			return nil, ErrCorruptSegment
		}
		if i == k {
			return p, nil
		}
	}
}
