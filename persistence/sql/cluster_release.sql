-- A clean shutdown: broker $1 gives up every lease and removes its row, so
-- the other brokers claim its shards on their next tick instead of after the
-- lease. Returns how many leases it gave up.
WITH freed AS (
    UPDATE queen.shard_leases
    SET owner = NULL, acquired_at = NULL, expires_at = clock_timestamp()
    WHERE owner = $1
    RETURNING shard
), gone AS (
    DELETE FROM queen.brokers WHERE id = $1
)
SELECT count(*) FROM freed
