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

// UnpackFrames unpacks a segment's frames and message ids. Each frame's
// strings and payload are copies: the result does not alias the arguments.
func UnpackFrames(messageIDs, frames []byte) ([]Frame, error) {
	if len(messageIDs)%16 != 0 {
		return nil, ErrCorruptSegment
	}
	out := make([]Frame, 0, len(messageIDs)/16)
	err := walkFrames(messageIDs, frames, func(v *frameView) error {
		f := Frame{MessageID: v.messageID, TransactionID: string(v.txn), Payload: append([]byte(nil), v.payload...)}
		if v.trace != nil {
			t := string(v.trace)
			f.TraceID = &t
		}
		out = append(out, f)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// frameView is one frame as walkFrames yields it: its fields alias the
// segment's bytes and are valid only during the callback.
type frameView struct {
	messageID uuid.UUID
	txn       []byte
	trace     []byte // nil: no trace id
	payload   []byte
}

// walkFrames calls fn for each frame of a segment, in order, without
// copying anything (one frameView reused for every frame). Bytes that do
// not decode, or message ids that do not pair one to one with the frames,
// are ErrCorruptSegment (fn may have been called for the frames before the
// fault); an error from fn stops the walk and is returned.
func walkFrames(messageIDs, frames []byte, fn func(*frameView) error) error {
	if len(messageIDs)%16 != 0 {
		return ErrCorruptSegment
	}
	b := frames
	next := func() ([]byte, bool) {
		l, k := binary.Uvarint(b)
		if k <= 0 || uint64(len(b)-k) < l {
			return nil, false
		}
		v := b[k : k+int(l) : k+int(l)]
		b = b[k+int(l):]
		return v, true
	}
	var v frameView
	for i, n := 0, len(messageIDs)/16; i < n; i++ {
		copy(v.messageID[:], messageIDs[i*16:])
		var ok bool
		if v.txn, ok = next(); !ok || len(b) == 0 {
			return ErrCorruptSegment
		}
		flag := b[0]
		b = b[1:]
		v.trace = nil
		if flag == 1 {
			if v.trace, ok = next(); !ok {
				return ErrCorruptSegment
			}
		}
		if v.payload, ok = next(); !ok {
			return ErrCorruptSegment
		}
		if err := fn(&v); err != nil {
			return err
		}
	}
	if len(b) != 0 {
		return ErrCorruptSegment
	}
	return nil
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
