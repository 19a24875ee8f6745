-- The first statement of a multi-partition pop's transaction (after
-- BEGIN), for that transaction only: no sequential scan. Its array
-- statements (consume_lock_many, consume_segments_many) look every
-- partition up by key inside LATERAL subqueries; a generic plan cached
-- while queen.consumers or queen.partitions was nearly empty (a broker's
-- first pops) would repeat a scan of the table per partition once it holds
-- 10,000 rows. Every lookup of the transaction has an index; COMMIT or
-- ROLLBACK restores the setting.
SELECT set_config('enable_seqscan', 'off', true)
