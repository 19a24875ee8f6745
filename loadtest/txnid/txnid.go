package txnid

import (
	"fmt"
	"math/bits"
	"strconv"
	"strings"
)

// An item's identity inside one producer is a key: the partition index in
// the high bits, the producer's sequence number of the transactionId in the
// low 40. A transactionId belongs to one producer and one partition for its
// whole life (repeats and retries go to the partition of its first send), so
// (producer, key) names one (partition, transactionId) pair.
const (
	// SeqBits is how many low bits of a key hold the sequence number (40).
	SeqBits = 40
	// SeqMask masks a key's sequence number; it is also the largest
	// sequence number a producer sends.
	SeqMask = 1<<SeqBits - 1
	// MaxProducers is the most producers a run has (4096): ParseTxn refuses
	// a producer index at or above it.
	MaxProducers = 4096
	// MaxPartitions is the most partitions a run spreads over: what the
	// key's 24 high bits hold.
	MaxPartitions = 1<<(64-SeqBits) - 1
)

// MakeKey is the key of sequence number seq (at most SeqMask) sent to the
// partition of index part (at most MaxPartitions).
func MakeKey(part int, seq uint64) uint64 { return uint64(part)<<SeqBits | seq }

// KeyPart is the partition index of key k.
func KeyPart(k uint64) int { return int(k >> SeqBits) }

// KeySeq is the sequence number of key k.
func KeySeq(k uint64) uint64 { return k & SeqMask }

// AppendTxn appends the transactionId of (producer, seq): "lt<producer>-<seq>".
func AppendTxn(dst []byte, producer int, seq uint64) []byte {
	dst = append(dst, 'l', 't')
	dst = strconv.AppendInt(dst, int64(producer), 10)
	dst = append(dst, '-')
	return strconv.AppendUint(dst, seq, 10)
}

// ParseTxn is the inverse of AppendTxn; ok is false for any other string
// (leading zeros, a producer index of MaxProducers or more, a sequence
// number above SeqMask).
func ParseTxn(s string) (producer int, seq uint64, ok bool) {
	rest, found := strings.CutPrefix(s, "lt")
	if !found {
		return 0, 0, false
	}
	p, q, found := strings.Cut(rest, "-")
	if !found {
		return 0, 0, false
	}
	n, err := strconv.Atoi(p)
	if err != nil || n < 0 || n >= MaxProducers || strconv.Itoa(n) != p {
		return 0, 0, false
	}
	sq, err := strconv.ParseUint(q, 10, 64)
	if err != nil || sq > SeqMask || strconv.FormatUint(sq, 10) != q {
		return 0, 0, false
	}
	return n, sq, true
}

// PartitionNames returns the run's partition names, p-00 ... in index order.
func PartitionNames(n int) []string {
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

// AppendPayload appends the JSON payload of (producer, seq), size bytes long
// when size is at least the envelope's length (else just the envelope):
// {"producer":P,"seq":S,"pad":"..."} with a pseudo-random pad derived from
// (producer, seq), so every send of a transactionId carries the same
// payload, as a retrying producer would, and payloads do not compress to
// nothing.
func AppendPayload(dst []byte, producer int, seq uint64, size int) []byte {
	start := len(dst)
	dst = append(dst, `{"producer":`...)
	dst = strconv.AppendInt(dst, int64(producer), 10)
	dst = append(dst, `,"seq":`...)
	dst = strconv.AppendUint(dst, seq, 10)
	dst = append(dst, `,"pad":"`...)
	pad := size - (len(dst) - start) - 2
	state := uint64(producer)<<48 ^ seq ^ 0x9e3779b97f4a7c15
	for pad > 0 {
		v := SplitMix64(&state)
		for i := 0; i < 10 && pad > 0; i++ {
			dst = append(dst, payloadAlphabet[v&63])
			v >>= 6
			pad--
		}
	}
	return append(dst, '"', '}')
}

// SplitMix64 advances the state s and returns its next pseudo-random value
// (Steele, Lea and Flood's SplitMix64): the mix behind payload pads and
// PartOf.
func SplitMix64(s *uint64) uint64 {
	*s += 0x9e3779b97f4a7c15
	z := *s
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// PartOf is the partition index of (producer, seq): a fixed mix, so a
// transactionId goes to one partition for its whole life and the audit
// needs no table of them.
func PartOf(producer int, seq uint64, parts int) int {
	s := uint64(producer)<<SeqBits ^ seq
	return int(SplitMix64(&s) % uint64(parts))
}

// PartIn is the partition index of (producer, seq) under the run's spread
// (loadtest.Config.Spread; sequential is SpreadSequential):
// PartOf when random; when sequential, each producer walks the partitions
// in order from its own start (the producers' starts spread evenly over the
// partitions by bit reversal of their index), so a run of n new items
// touches min(n, parts) distinct partitions.
func PartIn(sequential bool, producer int, seq uint64, parts int) int {
	if !sequential {
		return PartOf(producer, seq, parts)
	}
	start := bits.Reverse32(uint32(producer)) // a fraction of 2^32
	off := int(uint64(start) * uint64(parts) >> 32)
	return int((uint64(off) + seq%uint64(parts)) % uint64(parts))
}
