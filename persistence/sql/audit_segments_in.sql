-- The segments of some partitions of one queue that start above a
-- per-partition offset, for the load test's incremental audit (SPEC.md §12)
-- when it knows which partitions may hold something new: its cost follows
-- the partitions listed, not the queue's partition count (a pass over every
-- partition of a queue with 200,000 of them took most of a minute). One row
-- per segment with its packed frames, ordered by partition and offset, as
-- audit_segments_after.sql. The partitions are found through the
-- (queue_id, name) key; the offset bound sits in the LATERAL subquery so
-- that it bounds the index scan of each partition's segments.
-- $1 the queue name (text), $2 partition names (text[]), $3 the last offset
-- already read in each of them (bigint[], -1 for none); a name the queue
-- does not have is skipped.
SELECT p.name,
       p.id,
       s.first_offset,
       s.last_offset,
       s.created_at,
       s.legacy_ids,
       s.frames
FROM (
    -- A partition whose end is at or below its bound is skipped before its
    -- segments are looked at; OFFSET 0 keeps the filter below the scan (as
    -- audit_segments_after).
    SELECT p.id, p.name, r.after
      FROM unnest($2::text[], $3::bigint[]) AS r(name, after)
      JOIN queen.partitions p
        ON p.queue_id = (SELECT q.id FROM queen.queues q WHERE q.name = $1)
       AND p.name = r.name
      LEFT JOIN queen.partition_ends e ON e.partition_id = p.id
     WHERE COALESCE(e.last_offset, queen.partition_cold_end(p.id, p.floor_offset)) > r.after
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
