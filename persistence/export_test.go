package persistence

import "context"

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
