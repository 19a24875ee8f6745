package persistence

import (
	"bytes"
	"encoding/binary"
	"errors"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/klauspost/compress/zstd"
)

// Frame is one message inside a segment. Frames are packed back to back in
// segments.frames; their message ids are derived from the segment's
// partition, offsets and stamp (messageID), or, in a segment written before
// layout 3 (migration 0022), stored beside them in segments.legacy_ids (16
// bytes per frame, frame order); SegmentIDs says which.
//
// Packed layout of one frame (all lengths unsigned varints):
//
//	len(transactionId) transactionId  traceFlag [len(traceId) traceId]  len(payload) payload
//
// traceFlag is 0 for no trace id, 1 when one follows.
//
// segments.frames holds either those packed frames as they are or one zstd
// frame of them (packSegment); readers go through walkFrames, UnpackFrames
// or FramePayload, which take either form.
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

// zstdMagic starts every zstd frame (RFC 8878 §3.1.1), and so every
// compressed segment. Raw packed frames never start with it: they start
// with the uvarint length of the first frame's transactionId, and 0x28 is
// the one-byte uvarint 40, which would be followed by a 40-byte
// transactionId starting 0xB5, a UTF-8 continuation byte, which cannot
// start a valid UTF-8 string, and transactionIds are valid UTF-8 (the
// transports refuse a body that is not, SPEC.md §10). packSegment does not
// rely on that: raw frames that do start with the magic are stored
// compressed whatever the sizes, so the first four bytes decide the form
// of every row ever written.
var zstdMagic = []byte{0x28, 0xB5, 0x2F, 0xFD}

const (
	// minCompressBytes is the smallest packed frames packSegment tries to
	// compress: below it the frame header and the entropy tables cost
	// about what the compression saves (one 216-byte frame of 200 random
	// characters grows to 225), so the segment stays raw without spending
	// an encode on it.
	minCompressBytes = 256
	// maxSegmentBytes bounds the packed frames of a compressed segment, and
	// so what decompressing one may allocate, whatever a corrupt row
	// claims. A segment is one fused commit (actors.Config.MaxFusedBytes,
	// 16 MiB by default) inside one bundle (MaxBundleBytes, 64 MiB by
	// default); a larger segment (a configuration past those defaults) is
	// stored raw.
	maxSegmentBytes = 64 << 20
	// maxPooledBytes is the largest decompression buffer walkFrames keeps
	// for reuse; a larger one is left to the collector.
	maxPooledBytes = 1 << 20
)

// segmentEncoder and segmentDecoder serve every segment (EncodeAll and
// DecodeAll are safe for concurrent use, up to GOMAXPROCS at once). The
// encoder runs at SpeedFastest (the push path holds the partitions' row
// locks while it packs), without zstd's content checksum (4 bytes a
// segment: damage is caught by PostgreSQL's page checksums where the
// cluster has them, which localpg's initdb does not turn on, and otherwise
// only when the bytes no longer decode or unpack), as one
// single-segment frame (the header gives the content size, which the
// decoder checks against maxSegmentBytes before it allocates), with a
// 1 MiB window (matches in a segment are between its frames, a few hundred
// bytes apart; the window bounds each encoder's history buffer).
var (
	segmentEncoder = must(zstd.NewWriter(nil,
		zstd.WithEncoderLevel(zstd.SpeedFastest),
		zstd.WithEncoderCRC(false),
		zstd.WithSingleSegment(true),
		zstd.WithWindowSize(1<<20),
		zstd.WithEncoderConcurrency(0)))
	segmentDecoder = must(zstd.NewReader(nil,
		zstd.WithDecoderMaxMemory(maxSegmentBytes),
		zstd.WithDecoderConcurrency(0)))
	segmentBuffers = sync.Pool{New: func() any { return new([]byte) }}
)

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// compressedSegment reports whether stored, a segments.frames value, is a
// zstd frame rather than raw packed frames (zstdMagic).
func compressedSegment(stored []byte) bool { return bytes.HasPrefix(stored, zstdMagic) }

// packSegment returns what segments.frames stores for a segment's packed
// frames: one zstd frame of them when frames are at least minCompressBytes
// (and at most maxSegmentBytes) and the frame is smaller, else frames
// themselves. Raw frames starting with zstdMagic (not valid UTF-8
// transactionIds) are always compressed, so that no raw row reads as a
// compressed one.
func packSegment(frames []byte) []byte {
	ambiguous := compressedSegment(frames)
	if len(frames) > maxSegmentBytes || (len(frames) < minCompressBytes && !ambiguous) {
		return frames
	}
	z := segmentEncoder.EncodeAll(frames, make([]byte, 0, len(frames)))
	if len(z) >= len(frames) && !ambiguous {
		return frames
	}
	return z
}

// unpackSegment returns the packed frames of stored, a segments.frames
// value: stored itself when it is raw, else its zstd frame decompressed
// into buf[:0] (grown when too small). A compressed segment that does not
// decode, or holds more than maxSegmentBytes, is ErrCorruptSegment.
func unpackSegment(stored, buf []byte) ([]byte, error) {
	if !compressedSegment(stored) {
		return stored, nil
	}
	out, err := segmentDecoder.DecodeAll(stored, buf[:0])
	if err != nil {
		return nil, ErrCorruptSegment
	}
	return out, nil
}

// SegmentIDs is where a segment's message ids come from: Stored, the row's
// legacy_ids (16 bytes per frame, frame order; segments written before
// layout 3, and a dead letter's own id), or, when Stored is empty (the
// empty bytea later segments store, or nil), derived:
// the frame k's id is messageID(Partition, First+k, At), At being the
// segment's created_at.
type SegmentIDs struct {
	Stored    []byte
	Partition uuid.UUID
	First     int64
	At        time.Time
}

// StoredIDs is the SegmentIDs of ids stored as they are (16 bytes each).
func StoredIDs(ids []byte) SegmentIDs { return SegmentIDs{Stored: ids} }

// UnpackFrames unpacks a segment's frames (as stored: raw or compressed)
// with their message ids. Each frame's strings and payload are copies: the
// result does not alias the arguments.
func UnpackFrames(ids SegmentIDs, frames []byte) ([]Frame, error) {
	if len(ids.Stored)%16 != 0 {
		return nil, ErrCorruptSegment
	}
	out := make([]Frame, 0, max(len(ids.Stored)/16, 1))
	err := walkFrames(ids, frames, func(v *frameView) error {
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
// copying anything (one frameView reused for every frame). stored is the
// segments.frames value: raw packed frames, walked in place, or a zstd
// frame of them, decompressed into a buffer reused by later walks (so the
// views are valid only during the callback either way). Bytes that do not
// decode, or stored message ids that do not pair one to one with the
// frames, are ErrCorruptSegment (fn may have been called for the frames
// before the fault); an error from fn stops the walk and is returned.
// Derived ids (ids.Stored empty) are one per frame, however many there are.
func walkFrames(ids SegmentIDs, stored []byte, fn func(*frameView) error) error {
	if len(ids.Stored)%16 != 0 {
		return ErrCorruptSegment
	}
	frames := stored
	if compressedSegment(stored) {
		buf := segmentBuffers.Get().(*[]byte)
		var err error
		if frames, err = unpackSegment(stored, *buf); err != nil {
			segmentBuffers.Put(buf)
			return err
		}
		defer func() {
			if cap(frames) <= maxPooledBytes {
				*buf = frames[:0]
			}
			segmentBuffers.Put(buf)
		}()
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
	derived := len(ids.Stored) == 0
	for i, n := 0, len(ids.Stored)/16; i < n || (derived && len(b) > 0); i++ {
		if derived {
			v.messageID = messageID(ids.Partition, ids.First+int64(i), ids.At)
		} else {
			copy(v.messageID[:], ids.Stored[i*16:])
		}
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
// frames as stored (raw or compressed), skipping the frames before it
// without copying them; the result aliases stored when it is raw, else a
// fresh decompressed copy (callers reading several payloads of one
// compressed segment unpack it once with unpackSegment first). A k past the
// last frame or bytes that do not decode are ErrCorruptSegment.
func FramePayload(stored []byte, k int) ([]byte, error) {
	b, err := unpackSegment(stored, nil)
	if err != nil {
		return nil, err
	}
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
