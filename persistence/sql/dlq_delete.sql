-- Removes the dead letters $1 (bigint[]) that DLQ replay pushed back onto
-- their partitions (SPEC.md §13), inside the replay's transaction, under its
-- advisory locks (dlq_replay_lock); returns the ids it removed (a queue
-- deleted meanwhile may have removed some first).
DELETE FROM queen.dead_letters WHERE id = ANY ($1::bigint[]) RETURNING id
