-- The segments of one queue that start above a per-partition offset, for the
-- load test's incremental audit (SPEC.md §12): a run with retention reads
-- each partition's new segments every few seconds, before retention can
-- delete them. One row per segment with its packed frames; the caller
-- unpacks them (persistence/frame.go). Ordered by partition and offset.
-- The offset bound sits in a LATERAL subquery so that it is an index bound
-- of each partition's scan: as a join filter the planner read every segment
-- of the partition and dropped those already audited, a pass whose cost grew
-- with the run (1.3 s for 17k new segments among 110k after one minute).
-- $1 the queue name (text), $2 partition names (text[]), $3 the last offset
-- already read in each of them (bigint[]); a partition not listed is read
-- from offset 0.
SELECT p.name,
       p.id,
       s.first_offset,
       s.last_offset,
       s.created_at,
       s.legacy_ids,
       s.frames
FROM (
    -- Partitions with nothing new (their end is at or below the bound) are
    -- skipped before their segments are looked at: with hundreds of
    -- thousands of partitions, most have nothing new in a pass. OFFSET 0
    -- keeps this a subquery, so the filter runs before the segments' scan
    -- (the end comes from a join, which the planner could otherwise place
    -- after it).
    SELECT p.id, p.name, COALESCE(r.after, -1) AS after
      FROM queen.queues q
      JOIN queen.partitions p ON p.queue_id = q.id
      LEFT JOIN queen.partition_ends e ON e.partition_id = p.id
      LEFT JOIN unnest($2::text[], $3::bigint[]) AS r(name, after) ON r.name = p.name
     WHERE q.name = $1
       AND COALESCE(e.last_offset, queen.partition_cold_end(p.id, p.floor_offset)) > COALESCE(r.after, -1)
    OFFSET 0
) p
CROSS JOIN LATERAL (
    SELECT s.first_offset, s.last_offset, s.created_at, s.legacy_ids, s.frames
    FROM queen.segments s
    WHERE s.partition_id = p.id
      AND s.first_offset > p.after
    ORDER BY s.first_offset
) s
ORDER BY p.id, s.first_offset
