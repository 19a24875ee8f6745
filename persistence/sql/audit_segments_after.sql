-- The segments of one queue that start above a per-partition offset, for the
-- load test's incremental audit (SPEC.md §12): a run with retention reads
-- each partition's new segments every few seconds, before retention can
-- delete them. One row per segment with its packed frames; the caller
-- unpacks them (persistence/frame.go). Ordered by partition and offset so the
-- scan follows the primary key.
-- $1 the queue name (text), $2 partition names (text[]), $3 the last offset
-- already read in each of them (bigint[]); a partition not listed is read
-- from offset 0.
SELECT p.name,
       p.id,
       s.first_offset,
       s.last_offset,
       s.created_at,
       s.message_ids,
       s.frames
FROM queen.queues q
JOIN queen.partitions p ON p.queue_id = q.id
LEFT JOIN unnest($2::text[], $3::bigint[]) AS r(name, after) ON r.name = p.name
JOIN queen.segments s ON s.partition_id = p.id AND s.first_offset > COALESCE(r.after, -1)
WHERE q.name = $1
ORDER BY s.partition_id, s.first_offset
