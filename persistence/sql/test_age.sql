-- Tests only (Store.AgePartitions): what the passing of $2 seconds looks
-- like to the window check and retention, which run on PostgreSQL's clock,
-- for the partitions $1 (uuid[]): their segments and level-0 sidecar rows
-- get created_at moved back by $2 (the segments to segments_kept: no time
-- range of segments_timed holds the past, migration 0010; a level-0 row
-- moves to the range or DEFAULT partition that covers its new created_at).
-- A compacted range (level 1) keeps its entries under its real time
-- bounds, which no stored created_at leaves in production (a lookup skips a
-- range outside the span it looks in), so the level-1 entries of these
-- partitions leave their blocks (their partition number set to 0, which no
-- partition has: they match nothing) and are written to level 0 under
-- their new created_at, where the next compaction finds them; their fingerprints (migration 0021)
-- leave the compacted ranges with them. One statement: every part reads the
-- snapshot from before the move.
WITH s AS (
    UPDATE queen.segments
       SET created_at = created_at - make_interval(secs => $2::float8), timed = false
     WHERE partition_num IN (SELECT p.num FROM queen.partitions p WHERE p.id = ANY ($1::uuid[]))
), h AS (
    UPDATE queen.log_txn_hashes
       SET created_at = created_at - make_interval(secs => $2::float8)
     WHERE partition_id = ANY ($1::uuid[])
), n AS (
    SELECT p.id, p.num FROM queen.partitions p WHERE p.id = ANY ($1::uuid[])
), e AS (
    SELECT k.hashes[g.i] AS hash, n.id AS p, x.first, x.idx, x.stamp
      FROM queen.hash_blocks k
     CROSS JOIN LATERAL generate_subscripts(k.hashes, 1) AS g (i)
     CROSS JOIN LATERAL queen.hash_entry(k.entries, g.i) x
      JOIN n ON n.num = x.num
), f AS (
    DELETE FROM queen.hash_prints p WHERE p.partition_id = ANY ($1::uuid[])
), b AS (
    UPDATE queen.hash_blocks k
       SET entries = (SELECT string_agg(CASE WHEN x.num IN (SELECT n.num FROM n)
                                             THEN queen.hash_entry_pack(0, x.first, x.idx, x.stamp)
                                             ELSE substring(k.entries FROM (g.i - 1) * 28 + 1 FOR 28) END,
                                        ''::bytea ORDER BY g.i)
                        FROM generate_subscripts(k.hashes, 1) AS g (i)
                       CROSS JOIN LATERAL queen.hash_entry(k.entries, g.i) x)
     WHERE EXISTS (SELECT 1
                     FROM generate_subscripts(k.hashes, 1) AS g (i)
                    CROSS JOIN LATERAL queen.hash_entry(k.entries, g.i) x
                    WHERE x.num IN (SELECT n.num FROM n))
)
INSERT INTO queen.log_txn_hashes (partition_id, hash, "offset", segment, created_at)
SELECT e.p, e.hash, e.first + e.idx, e.first, e.stamp - make_interval(secs => $2::float8)
  FROM e
