-- Bumps each allocator of a bundle or a transaction (its row of
-- queen.partition_ends, migration 0019, UNLOGGED: no WAL) to its
-- partition's new end, taking the row's lock if the commit does not hold it
-- yet (README, Architecture, "The write authority"; SPEC.md §2), and only
-- where the partition still ends where the commit's offsets assumed: one
-- row per partition (parallel arrays), $1 partition id, $2 the end the
-- commit's offsets follow, $3 the new end.
--
-- A partition its actor knew (persistence.lockBundle: a watermark and the
-- partition's number from an earlier outcome) was not locked before its
-- probe: its row lock is taken here. An UPDATE that waits for another
-- writer's lock re-reads the row once that writer ends (READ COMMITTED), so
-- a partition another writer moved since (a transaction, another broker's
-- commit while a shard moved, a commit whose outcome its actor never
-- learnt), or whose row is gone (its queue deleted, or a crash emptied the
-- table), is not updated and not returned. The caller counts the rows
-- returned: fewer than it sent, and it rolls the commit back before
-- anything else is written and runs it again with every row locked first
-- (bundle_lock). A partition locked by bundle_lock always ends where the
-- commit assumed.
--
-- The commit's stamp (bundle_stamp) is read after this statement, in the
-- same round trip, so every write of the commit is stamped under its rows'
-- locks (SPEC.md §2).
UPDATE queen.partition_ends e
   SET last_offset = n.last_offset
  FROM unnest($1::uuid[], $2::bigint[], $3::bigint[]) AS n (partition_id, expected, last_offset)
 WHERE e.partition_id = n.partition_id
   AND e.last_offset = n.expected
RETURNING e.partition_id
