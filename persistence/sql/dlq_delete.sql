-- Removes the dead letters $1 (bigint[]) that DLQ replay pushed back onto
-- their partitions (SPEC.md §13); returns the ids it removed (a concurrent
-- replay may have removed some first).
DELETE FROM queen.dead_letters WHERE id = ANY ($1::bigint[]) RETURNING id
