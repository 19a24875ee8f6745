-- The stored segments the read-only load-test audit reads (SPEC.md §12), one
-- statement for its three reads (persistence.Audit): every segment of the
-- queues $1 (text[]), the final audit's pass ($2, $3 empty, $4 false); the
-- segments of one queue ($1 of one name) above a per-partition bound, a
-- partition named in $2 (text[]) from above its $3 (bigint[]: the last
-- offset already read, -1 for none) and any other from offset 0 ($4 false,
-- the incremental audit's pass over a queue); or of the partitions named in
-- $2 only ($4 true, when the audit knows which partitions may hold
-- something new: its cost then follows the partitions listed, not the
-- queue's partition count; a pass over every partition of a queue with
-- 200,000 of them took most of a minute). A name the queue does not have
-- is skipped. $5 (timestamptz[], parallel to $2; -infinity for unknown)
-- is the time of the segment holding each named partition's bound: a
-- partition's stamps rise with its offsets (bundle_stamp), so its segments
-- above the bound are searched only in the time ranges from there on, and
-- never in the ranges made ahead of now (persistence.segmentLead: every
-- segment this statement sees was stamped before it read the clock, after
-- its snapshot). At 10,000 partitions with a 5-minute retention a pass
-- descended every range of every listed partition, 250,000-400,000
-- buffers a pass, half a core of PostgreSQL on this machine, growing as
-- ranges filled.
--
-- One row per segment: queue, partition name and id, offsets, created_at,
-- the stored ids (legacy_ids: empty when derived, persistence.messageID)
-- and the packed frames, which the caller unpacks (persistence/frame.go).
-- Each partition's segments come together, in offset order (the LATERAL
-- index scan, run once per partition); the partitions come in no particular
-- order. There is no ORDER BY over the whole: a pass of the incremental
-- audit at 10,000 partitions sorted its 50,000 segments (15 MB, spilled to
-- disk) for nothing, a third of the statement's time, and the final
-- recount sorted every segment of the queue.
--
-- $4 picks one branch of the UNION ALL; the other's condition is a one-time
-- filter on a parameter, so it costs nothing even in a generic plan. The
-- listed branch finds its partitions through the (queue_id, name) key.
-- Partitions with nothing new (their end is at or below the bound) are
-- skipped before their segments are looked at: with hundreds of thousands
-- of partitions, most have nothing new in a pass. OFFSET 0 keeps the
-- partitions a subquery, so that filter runs before the segments' scan
-- (the end comes from a join, which the planner could otherwise place
-- after it), and the offset bound sits in the LATERAL subquery so that it
-- is an index bound of each partition's scan: as a join filter the planner
-- read every segment of the partition and dropped those already audited, a
-- pass whose cost grew with the run (1.3 s for 17k new segments among 110k
-- after one minute).
SELECT p.queue,
       p.name,
       p.id,
       s.first_offset,
       s.last_offset,
       s.created_at,
       s.legacy_ids,
       s.frames
FROM (
    SELECT p.id, p.num, p.name, ($1::text[])[1] AS queue, r.after, COALESCE(r.since, '-infinity'::timestamptz) AS since, clock_timestamp() AS now
      FROM unnest($2::text[], $3::bigint[], $5::timestamptz[]) AS r(name, after, since)
      JOIN queen.partitions p
        ON p.queue_id = (SELECT q.id FROM queen.queues q WHERE q.name = ($1::text[])[1])
       AND p.name = r.name
      LEFT JOIN queen.partition_ends e ON e.partition_id = p.id
     WHERE $4::boolean
       AND COALESCE(e.last_offset, queen.partition_cold_end(p.id, p.floor_offset)) > r.after
    UNION ALL
    SELECT p.id, p.num, p.name, q.name, COALESCE(r.after, -1), COALESCE(r.since, '-infinity'::timestamptz), clock_timestamp()
      FROM queen.queues q
      JOIN queen.partitions p ON p.queue_id = q.id
      LEFT JOIN queen.partition_ends e ON e.partition_id = p.id
      LEFT JOIN unnest($2::text[], $3::bigint[], $5::timestamptz[]) AS r(name, after, since) ON r.name = p.name
     WHERE NOT $4::boolean AND q.name = ANY ($1::text[])
       AND COALESCE(e.last_offset, queen.partition_cold_end(p.id, p.floor_offset)) > COALESCE(r.after, -1)
    OFFSET 0
) p
CROSS JOIN LATERAL (
    SELECT s.first_offset, s.last_offset, s.created_at, s.legacy_ids, s.frames
    FROM queen.segments s
    WHERE s.partition_num = p.num
      AND s.first_offset > p.after
      AND s.created_at >= p.since AND s.created_at <= p.now
    ORDER BY s.first_offset
) s
