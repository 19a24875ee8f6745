-- Every segment of the named queues, for the read-only load-test audit
-- (SPEC.md §12): one row per segment with its queue, partition and packed
-- frames; the caller unpacks the frames (persistence/frame.go). Ordered by
-- partition and offset so the scan follows the primary key.
-- $1 the queue names (text[]).
SELECT q.name,
       p.name,
       p.id,
       s.first_offset,
       s.last_offset,
       s.created_at,
       s.legacy_ids,
       s.frames
FROM queen.queues q
JOIN queen.partitions p ON p.queue_id = q.id
JOIN queen.segments s ON s.partition_id = p.id
WHERE q.name = ANY ($1::text[])
ORDER BY s.partition_id, s.first_offset
