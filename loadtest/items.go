package loadtest

import (
	"fmt"
	"strconv"
	"strings"
)

// An item's identity inside one producer is a key: the partition index in
// the high bits, the producer's sequence number of the transactionId in the
// low 40. A transactionId belongs to one producer and one partition for its
// whole life (repeats and retries go to the partition of its first send), so
// (producer, key) names one (partition, transactionId) pair.
const (
	seqBits      = 40
	seqMask      = 1<<seqBits - 1
	maxProducers = 4096
	// maxPartitions is the most partitions a run spreads over: what the
	// key's 24 high bits hold.
	maxPartitions = 1<<(64-seqBits) - 1
)

func makeKey(part int, seq uint64) uint64 { return uint64(part)<<seqBits | seq }
func keyPart(k uint64) int                { return int(k >> seqBits) }
func keySeq(k uint64) uint64              { return k & seqMask }

// appendTxn appends the transactionId of (producer, seq): "lt<producer>-<seq>".
func appendTxn(dst []byte, producer int, seq uint64) []byte {
	dst = append(dst, 'l', 't')
	dst = strconv.AppendInt(dst, int64(producer), 10)
	dst = append(dst, '-')
	return strconv.AppendUint(dst, seq, 10)
}

// parseTxn is the inverse of appendTxn; ok is false for any other string.
func parseTxn(s string) (producer int, seq uint64, ok bool) {
	rest, found := strings.CutPrefix(s, "lt")
	if !found {
		return 0, 0, false
	}
	p, q, found := strings.Cut(rest, "-")
	if !found {
		return 0, 0, false
	}
	n, err := strconv.Atoi(p)
	if err != nil || n < 0 || n >= maxProducers || strconv.Itoa(n) != p {
		return 0, 0, false
	}
	sq, err := strconv.ParseUint(q, 10, 64)
	if err != nil || sq > seqMask || strconv.FormatUint(sq, 10) != q {
		return 0, 0, false
	}
	return n, sq, true
}

// partitionNames returns the run's partition names, p-00 ... in index order.
func partitionNames(n int) []string {
	width := len(strconv.Itoa(n - 1))
	if width < 2 {
		width = 2
	}
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("p-%0*d", width, i)
	}
	return out
}

// payloadAlphabet is 64 characters that need no JSON escaping.
const payloadAlphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_"

// appendPayload appends the JSON payload of (producer, seq), size bytes long
// when size is at least the envelope's length (else just the envelope):
// {"producer":P,"seq":S,"pad":"..."} with a pseudo-random pad derived from
// (producer, seq), so every send of a transactionId carries the same
// payload, as a retrying producer would, and payloads do not compress to
// nothing.
func appendPayload(dst []byte, producer int, seq uint64, size int) []byte {
	start := len(dst)
	dst = append(dst, `{"producer":`...)
	dst = strconv.AppendInt(dst, int64(producer), 10)
	dst = append(dst, `,"seq":`...)
	dst = strconv.AppendUint(dst, seq, 10)
	dst = append(dst, `,"pad":"`...)
	pad := size - (len(dst) - start) - 2
	state := uint64(producer)<<48 ^ seq ^ 0x9e3779b97f4a7c15
	for pad > 0 {
		v := splitmix64(&state)
		for i := 0; i < 10 && pad > 0; i++ {
			dst = append(dst, payloadAlphabet[v&63])
			v >>= 6
			pad--
		}
	}
	return append(dst, '"', '}')
}

func splitmix64(s *uint64) uint64 {
	*s += 0x9e3779b97f4a7c15
	z := *s
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}
