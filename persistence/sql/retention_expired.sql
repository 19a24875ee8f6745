-- Deletes segments older than their queue's retentionSeconds, consumed or
-- not (SPEC.md §6, §7). $1 is the batch: at most $1 segments, and no more
-- once those taken hold $1 messages (a segment is never split). Returns the
-- segments and messages deleted.
--
-- The walk is retention_sidecar's: per partition, oldest first through
-- segments_offset, stopping at the first younger segment; no partition row
-- lock. Segments in a time range of segments_timed (migration 0010) are
-- left to the range's drop (segranges.go) while they are less than a grace
-- past their queue's retention: the range span its retention asks for
-- (queen.segment_span_minutes) plus $2 seconds (a pass); the walk stops
-- there. $2 NULL (tests) gives no grace. So it deletes only the segments of
-- segments_kept (a queue that gained a retention, or a segment written
-- while no range held its time) and of a range kept by a queue with a
-- longer retention. Rows are deleted by (tableoid, ctid): a ctid alone is
-- not unique across partitions. The sidecar is left alone: a repeat of a deleted
-- message's transactionId inside the window is still a duplicate (with the
-- zero message id), and acks by transactionId still resolve.
--
-- Never past the sidecar's compaction (migration 0017): a segment stored at
-- or after the lower bound of the oldest level-0 range of the hash sidecar
-- that is not compacted yet stays, because a crash rebuilds that range from
-- the segments' hashes (queen.sidecar_refill).
WITH RECURSIVE part AS MATERIALIZED (
    SELECT p.id, p.num,
           LEAST(clock_timestamp() - make_interval(secs => (q.options ->> 'retentionSeconds')::float8),
                 (SELECT COALESCE(min(r.lo), 'infinity'::timestamptz) FROM queen.sidecar_ranges r WHERE r.bits IS NULL)) AS cutoff,
           make_interval(secs => COALESCE(60 * queen.segment_span_minutes((q.options ->> 'retentionSeconds')::float8) + $2::float8, 0)) AS grace
      FROM queen.queues q
      JOIN queen.partitions p ON p.queue_id = q.id
     WHERE COALESCE((q.options ->> 'retentionSeconds')::bigint, 0) > 0
), walk AS (
    SELECT part.id, part.num, part.cutoff, part.grace, s.tableoid, s.ctid, s.first_offset, s.frames, 1 AS n
      FROM part
     CROSS JOIN LATERAL (
        SELECT s.tableoid, s.ctid, s.first_offset, s.last_offset - s.first_offset + 1 AS frames, s.created_at, s.timed
          FROM queen.segments s
         WHERE s.partition_num = part.num
           -- created_at grows with the offset: the oldest segment older than
           -- the cutoff is the oldest one, or there is none; the ranges stored
           -- after the cutoff are pruned (run-time partition pruning).
           AND s.created_at < part.cutoff
         ORDER BY s.first_offset
         LIMIT 1
     ) s
     WHERE s.created_at < part.cutoff
       AND (NOT s.timed
            OR s.created_at < part.cutoff - part.grace)
    UNION ALL
    SELECT w.id, w.num, w.cutoff, w.grace, s.tableoid, s.ctid, s.first_offset, s.frames, w.n + 1
      FROM walk w
     CROSS JOIN LATERAL (
        SELECT s.tableoid, s.ctid, s.first_offset, s.last_offset - s.first_offset + 1 AS frames, s.created_at, s.timed
          FROM queen.segments s
         WHERE s.partition_num = w.num AND s.first_offset > w.first_offset
           AND s.created_at < w.cutoff
         ORDER BY s.first_offset
         LIMIT 1
     ) s
     WHERE s.created_at < w.cutoff AND w.n < $1::bigint
       AND (NOT s.timed
            OR s.created_at < w.cutoff - w.grace)
), pick AS MATERIALIZED (
    SELECT x.tableoid, x.ctid
      FROM (SELECT w.tableoid, w.ctid, w.frames, sum(w.frames) OVER (ROWS UNBOUNDED PRECEDING) AS acc
              FROM (SELECT * FROM walk LIMIT $1::bigint) w) x
     WHERE x.acc - x.frames < $1::bigint
), d AS (
    DELETE FROM queen.segments s
     WHERE s.ctid = ANY (ARRAY(SELECT ctid FROM pick))
       AND (s.tableoid, s.ctid) IN (SELECT tableoid, ctid FROM pick)
    RETURNING s.partition_num, s.last_offset, s.last_offset - s.first_offset + 1 AS frames
), f AS (
{{floor}}
)
SELECT count(*), COALESCE(sum(frames), 0)::bigint FROM d
