package persistence

import (
	"context"

	"github.com/google/uuid"
)

// ExpireLeases (tests only) makes every lease held now expired, unsettled:
// the next pop or ack of its consumer row settles it (storetest.Store).
func (s *Store) ExpireLeases(ctx context.Context) error {
	_, err := s.pool.Exec(ctx, `UPDATE queen.consumers SET lease_expires_at = clock_timestamp() - interval '1 second' WHERE lease_id IS NOT NULL`)
	return err
}

// check is nil when key is known.
func (k *knownRows) check(key ackKey) error {
	if k.has(key) {
		return nil
	}
	return errStaleKnown
}

var sqlTestForgetHashes = q("test_forget_hashes")

// ForgetHashes forgets the transaction-id hashes of the segment of
// partition pid starting at firstOffset (its hashes and its level-0 rows),
// as if its sidecar had aged out: acks by transactionId of its messages
// resolve nothing, and an ack by offset is not checked against a
// transactionId.
func (s *Store) ForgetHashes(ctx context.Context, pid uuid.UUID, firstOffset int64) error {
	_, err := s.pool.Exec(ctx, sqlTestForgetHashes, pid, firstOffset)
	return unavailable(err)
}
