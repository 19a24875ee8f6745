-- The queues with rows in range n of segments_timed that still keep them
-- at time t: queues without retentionSeconds now, or whose retention
-- reaches past hi (t - retentionSeconds < hi). Found by a skip scan over
-- the range's distinct partitions (one index descent each); the queue rows
-- are read FOR SHARE, so a configure that changes a retention waits for
-- the caller's transaction (and the drop it decides). Plus one while the
-- hash sidecar has not compacted the range's time (a level-0 range below
-- hi is still open): its rows are the logged source a crash's rebuild of
-- level 0 reads (migration 0017).
CREATE OR REPLACE FUNCTION queen.segment_range_keepers(n text, hi timestamptz, t timestamptz) RETURNS bigint
    LANGUAGE plpgsql
AS $$
DECLARE
    k bigint;
BEGIN
    EXECUTE format($q$
        WITH RECURSIVE d AS (
            (SELECT s.partition_num FROM queen.%1$I s ORDER BY s.partition_num LIMIT 1)
            UNION ALL
            SELECT (SELECT s.partition_num FROM queen.%1$I s WHERE s.partition_num > d.partition_num
                     ORDER BY s.partition_num LIMIT 1)
              FROM d WHERE d.partition_num IS NOT NULL
        ), qs AS (
            SELECT q.id, COALESCE((q.options ->> 'retentionSeconds')::float8, 0) AS r
              FROM queen.queues q
             WHERE q.id IN (SELECT p.queue_id FROM queen.partitions p
                             WHERE p.num IN (SELECT partition_num FROM d WHERE partition_num IS NOT NULL))
             FOR SHARE
        )
        SELECT count(*) FROM qs WHERE qs.r <= 0 OR $1 - make_interval(secs => qs.r) < $2
    $q$, n) INTO k USING t, hi;
    IF EXISTS (SELECT 1 FROM queen.sidecar_ranges r WHERE r.bits IS NULL AND r.lo < segment_range_keepers.hi) THEN
        k := k + 1;
    END IF;
    RETURN k;
END
$$;
