-- Creates the cluster row with $1 shards and their free leases the first
-- time, and returns the stored shard count (fixed at creation, SPEC.md §9).
-- When another broker creates the row at the same moment, this statement
-- waits for it and its snapshot may not see the row: it then returns no row
-- and the caller runs it again.
WITH created AS (
    INSERT INTO queen.cluster (shard_count) VALUES ($1)
    ON CONFLICT (singleton) DO NOTHING
    RETURNING shard_count
), leases AS (
    INSERT INTO queen.shard_leases (shard)
    SELECT s FROM created, generate_series(0, created.shard_count - 1) AS s
)
SELECT shard_count FROM created
UNION ALL
SELECT shard_count FROM queen.cluster
LIMIT 1
