-- Deletes queue $1 with everything it owns: segments, sidecar rows, the
-- partitions' allocator rows (no foreign keys, for insert speed) and, by
-- cascade, partitions, consumer rows, subscriptions and dead letters. Runs
-- after admin_delete_queue_lock in the same transaction (its locks are held
-- already, so an in-flight push has finished, and this statement's
-- snapshot sees what it wrote). Returns the queue id when it existed. Its rows of
-- queen.consumer_leases are left to the retention pass (they match no
-- consumer row any more).
WITH q AS (
    SELECT id FROM queen.queues WHERE name = $1 FOR UPDATE
), p AS (
    SELECT id, num FROM queen.partitions WHERE queue_id IN (SELECT id FROM q) ORDER BY id FOR UPDATE
), s AS (
    DELETE FROM queen.segments WHERE partition_num IN (SELECT num FROM p)
), h AS (
    DELETE FROM queen.log_txn_hashes WHERE partition_id IN (SELECT id FROM p)
), e AS (
    -- The allocator rows (migration 0019): a push that comes after finds
    -- no row and no partition (ErrPartitionGone).
    DELETE FROM queen.partition_ends WHERE partition_id IN (SELECT id FROM p)
)
DELETE FROM queen.queues WHERE id IN (SELECT id FROM q) RETURNING id, (SELECT count(*) FROM p)
