-- The hash cache's hydration (SPEC.md §8): the transaction-id hashes of the
-- segments of partition $1 starting after $2 and at or before $3, stored
-- inside the last $4 seconds (PostgreSQL's clock), in offset order, with
-- edge false; then one row with edge true (no hashes) that tells whether
-- retention removed segments the cache would need (migration 0017: the
-- hashes live in the segments, and a queue whose retention is shorter than
-- its window loses segments inside the window):
--  * when segments were found: the segment just below the first of them
--    (none when the partition holds nothing below it);
--  * else the last segment starting at or before $3 (none when there is
--    none).
-- Reads segments_offset (the time ranges of segments_timed older than the
-- window pruned: statement_timestamp() is stable); no lock. A segment older
-- than migration 0017 whose hashes had aged out has none (NULL) and is not
-- returned (persistence.Store.SidecarRange reads it as a hole).
WITH s AS MATERIALIZED (
    SELECT t.first_offset, t.last_offset, t.created_at, t.hashes
      FROM queen.segments t
     WHERE t.partition_num = (SELECT n.num FROM queen.partitions n WHERE n.id = $1)
       AND t.first_offset > $2
       AND t.first_offset <= $3
       AND t.created_at > statement_timestamp() - make_interval(secs => $4::bigint)
       AND t.created_at > clock_timestamp() - make_interval(secs => $4::bigint)
       AND t.hashes IS NOT NULL
), f AS (
    SELECT min(s.first_offset) AS first FROM s
)
SELECT s.first_offset, s.last_offset, s.created_at, s.hashes, false AS edge FROM s
UNION ALL
SELECT e.first_offset, e.last_offset, e.created_at, NULL, true
  FROM f
 CROSS JOIN LATERAL (
    SELECT x.first_offset, x.last_offset, x.created_at
      FROM queen.segments x
     WHERE x.partition_num = (SELECT n.num FROM queen.partitions n WHERE n.id = $1)
       AND x.first_offset < COALESCE(f.first, $3 + 1)
       AND x.first_offset > -4611686018427387904
     ORDER BY x.first_offset DESC
     LIMIT 1
 ) e
ORDER BY 5, 1
