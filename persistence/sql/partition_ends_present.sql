-- Which of the partitions $1 (uuid[]) have an allocator row in
-- queen.partition_ends (migration 0019), read right after a bundle's second
-- attempt took its locks with SKIP LOCKED (Store.lockBundle): a partition
-- with a row that the lock skipped is held by another session (busy); one
-- without was deleted or lost its row to a crash (as bundle_lock).
SELECT partition_id FROM queen.partition_ends WHERE partition_id = ANY ($1::uuid[])
