package txnid

// The consumers' failure injection must be exactly countable: a message is
// poison (its handler fails on every delivery) iff a deterministic function
// of its transactionId falls under the run's fail ratio. Every group sees
// the same poison messages, every delivery of a poison message fails, and
// every other message succeeds at once, so the audit knows exactly how
// often each message must be delivered and which ones must be dead-lettered.

// poisonUnit maps a transactionId to [0, 1): FNV-1a 64 of its bytes, then
// a SplitMix64 finalizer (consecutive ids like lt0-1, lt0-2 differ in one
// byte), top 53 bits.
func poisonUnit(txn string) float64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(txn); i++ {
		h ^= uint64(txn[i])
		h *= 1099511628211
	}
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return float64(h>>11) / (1 << 53)
}

// IsPoison reports whether the handler fails every delivery of the message
// with transactionId txn under fail ratio ratio (0: none, 1: all).
func IsPoison(txn string, ratio float64) bool {
	switch {
	case ratio <= 0:
		return false
	case ratio >= 1:
		return true
	}
	return poisonUnit(txn) < ratio
}

// Fingerprint is a 32-bit fingerprint of a transactionId (FNV-1a 32), kept per
// delivered message so the audit can tell that a delivery carried the
// stored message's transactionId without keeping the string.
func Fingerprint(txn string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(txn); i++ {
		h ^= uint32(txn[i])
		h *= 16777619
	}
	return h
}

// The ways a consumer fails a poison message (loadtest.Config.FailMode).
const (
	// FailNack: the consumer acks the poison message failed.
	FailNack = "nack"
	// FailCrash: the consumer acks the messages before the poison message,
	// never acks it and abandons its lease, as if it crashed handling it;
	// the lease's expiry counts the failure when the poison message is the
	// span's only unacked message, else bisects (SPEC.md §4).
	FailCrash = "crash"
	// FailCrashBatch: the consumer handles the whole batch and acks it at
	// the end; a poison message crashes it first, so nothing of the batch
	// is acked and the lease is abandoned. The broker isolates the poison
	// message by bisecting the next deliveries; only its expiries alone
	// count failures (SPEC.md §4).
	FailCrashBatch = "crash-batch"
)

// Crashes reports whether mode is a fail mode whose consumer abandons its
// lease on a poison message (FailCrash, FailCrashBatch).
func Crashes(mode string) bool { return mode == FailCrash || mode == FailCrashBatch }

// PoisonError is the error text of the harness's failed acks.
const PoisonError = "loadtest: poison message"
