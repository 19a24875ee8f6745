package shards

import (
	"encoding/binary"
	"errors"

	queen "github.com/queen-mq/queen-go"
)

// The internal hop encoding, between brokers only. Items were validated at
// the front door; hashes are recomputed on arrival.
//
//	request: uvarint count, then per item: str queue, str partition, str txn,
//	         byte hasTrace [str trace], str payload
//	reply:   uvarint count, then per item: byte verdict, 16 message id,
//	         16 partition id, varint offset, str code, str error
//
// str is a uvarint length followed by the bytes.

var errCorrupt = errors.New("shards: corrupt internal message")

func appendStr(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func encodeItems(dst []byte, items []*queen.Item) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(items)))
	for _, it := range items {
		dst = appendStr(dst, it.Queue)
		dst = appendStr(dst, it.Partition)
		dst = appendStr(dst, it.TransactionID)
		if it.TraceID == nil {
			dst = append(dst, 0)
		} else {
			dst = append(dst, 1)
			dst = appendStr(dst, *it.TraceID)
		}
		dst = binary.AppendUvarint(dst, uint64(len(it.Payload)))
		dst = append(dst, it.Payload...)
	}
	return dst
}

type reader struct {
	b   []byte
	err error
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = errCorrupt
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) bytes(n int) []byte {
	if r.err != nil || n < 0 || n > len(r.b) {
		r.err = errCorrupt
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) str() string { return string(r.bytes(int(r.uvarint()))) }

func (r *reader) byte1() byte {
	b := r.bytes(1)
	if b == nil {
		return 0
	}
	return b[0]
}

func decodeItems(b []byte) ([]*queen.Item, error) {
	r := &reader{b: b}
	n := r.uvarint()
	if n > queen.MaxItems*2 {
		return nil, errCorrupt
	}
	items := make([]*queen.Item, 0, n)
	for i := uint64(0); i < n && r.err == nil; i++ {
		it := &queen.Item{Queue: r.str(), Partition: r.str(), TransactionID: r.str()}
		if r.byte1() == 1 {
			t := r.str()
			it.TraceID = &t
		}
		it.Payload = r.bytes(int(r.uvarint()))
		it.Hash = queen.HashTxn(it.TransactionID)
		items = append(items, it)
	}
	if r.err == nil && len(r.b) != 0 {
		r.err = errCorrupt
	}
	return items, r.err
}

var verdictCodes = []queen.Verdict{queen.Failed, queen.Queued, queen.Duplicate}

func verdictByte(v queen.Verdict) byte {
	for i, c := range verdictCodes {
		if c == v {
			return byte(i)
		}
	}
	return 0
}

// flagPayloadMismatch is OR-ed into a result's verdict byte for a duplicate
// with queen.Result.PayloadMismatch (SPEC.md §6).
const flagPayloadMismatch = 0x80

func encodeResults(dst []byte, rs []queen.Result) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(rs)))
	for _, r := range rs {
		v := verdictByte(r.Verdict)
		if r.PayloadMismatch {
			v |= flagPayloadMismatch
		}
		dst = append(dst, v)
		dst = append(dst, r.MessageID[:]...)
		dst = append(dst, r.PartitionID[:]...)
		dst = binary.AppendVarint(dst, r.Offset)
		if r.Err != nil {
			dst = appendStr(dst, r.Err.Code)
			dst = appendStr(dst, r.Err.Message)
		} else {
			dst = appendStr(dst, "")
			dst = appendStr(dst, "")
		}
	}
	return dst
}

func decodeResults(b []byte) ([]queen.Result, error) {
	r := &reader{b: b}
	n := r.uvarint()
	if n > queen.MaxItems*2 {
		return nil, errCorrupt
	}
	out := make([]queen.Result, 0, n)
	for i := uint64(0); i < n && r.err == nil; i++ {
		var res queen.Result
		v := r.byte1()
		res.PayloadMismatch = v&flagPayloadMismatch != 0
		v &^= flagPayloadMismatch
		if int(v) >= len(verdictCodes) {
			return nil, errCorrupt
		}
		res.Verdict = verdictCodes[v]
		copy(res.MessageID[:], r.bytes(16))
		copy(res.PartitionID[:], r.bytes(16))
		if r.err == nil {
			off, k := binary.Varint(r.b)
			if k <= 0 {
				return nil, errCorrupt
			}
			r.b = r.b[k:]
			res.Offset = off
		}
		code, msg := r.str(), r.str()
		if code != "" {
			res.Err = errorFor(code, msg)
		}
		out = append(out, res)
	}
	if r.err == nil && len(r.b) != 0 {
		r.err = errCorrupt
	}
	return out, r.err
}

// errorFor rebuilds a registry error from its code on the receiving broker;
// a code it does not list becomes queen.ErrInternal with msg.
func errorFor(code, msg string) *queen.Error {
	for _, e := range []*queen.Error{queen.ErrOverloaded, queen.ErrUnavailable, queen.ErrCommitUnknown, queen.ErrShuttingDown, queen.ErrTimeout,
		queen.ErrLockTimeout, queen.ErrPartitionGone, queen.ErrStorageFull, queen.ErrNATSUnavailable} {
		if e.Code == code {
			return e.With("%s", msg)
		}
	}
	return queen.ErrInternal.With("%s", msg)
}
