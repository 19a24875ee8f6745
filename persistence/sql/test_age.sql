-- Tests only (Store.AgePartitions): what the passing of $2 seconds looks
-- like to the window check and retention, which run on PostgreSQL's clock,
-- for the partitions $1 (uuid[]): their segments and level-0 sidecar rows
-- get created_at moved back by $2 (the segments to segments_kept: no time
-- range of segments_timed holds the past, migration 0010; a level-0 row
-- moves to the range or DEFAULT partition that covers its new created_at).
-- A compacted range (level 1) keeps its entries under its real time
-- bounds, which no stored created_at leaves in production (a lookup skips a
-- range outside the span it looks in), so the level-1 entries of these
-- partitions leave their blocks (their partition set to NULL: they match
-- nothing) and are written to level 0 under their new created_at, where
-- the next compaction finds them; their fingerprints (migration 0021)
-- leave the compacted ranges with them. One statement: every part reads the
-- snapshot from before the move.
WITH s AS (
    UPDATE queen.segments
       SET created_at = created_at - make_interval(secs => $2::float8), timed = false
     WHERE partition_id = ANY ($1::uuid[])
), h AS (
    UPDATE queen.log_txn_hashes
       SET created_at = created_at - make_interval(secs => $2::float8)
     WHERE partition_id = ANY ($1::uuid[])
), e AS (
    SELECT u.hash, u.p, u.first, u.idx, u.stamp
      FROM queen.hash_blocks k
     CROSS JOIN LATERAL unnest(k.hashes, k.parts, k.firsts, k.idxs, k.stamps) AS u (hash, p, first, idx, stamp)
     WHERE k.parts && $1::uuid[] AND u.p = ANY ($1::uuid[])
), f AS (
    DELETE FROM queen.hash_prints p WHERE p.partition_id = ANY ($1::uuid[])
), b AS (
    UPDATE queen.hash_blocks k
       SET parts = (SELECT array_agg(CASE WHEN u.p = ANY ($1::uuid[]) THEN NULL ELSE u.p END ORDER BY u.ord)
                      FROM unnest(k.parts) WITH ORDINALITY AS u (p, ord))
     WHERE k.parts && $1::uuid[]
)
INSERT INTO queen.log_txn_hashes (partition_id, hash, "offset", segment, created_at)
SELECT e.p, e.hash, e.first + e.idx, e.first, e.stamp - make_interval(secs => $2::float8)
  FROM e
