-- Deletes segments older than their queue's retentionSeconds, consumed or
-- not (SPEC.md §6, §7). $1 is the batch: at most $1 segments, and no more
-- once those taken hold $1 messages (a segment is never split). Returns the
-- segments and messages deleted.
--
-- The walk is retention_sidecar's: per partition, oldest first through the
-- primary key, stopping at the first younger segment; deletes by ctid; no
-- partition row lock. The sidecar is left alone: a repeat of a deleted
-- message's transactionId inside the window is still a duplicate (with the
-- zero message id), and acks by transactionId still resolve.
WITH RECURSIVE part AS MATERIALIZED (
    SELECT p.id,
           clock_timestamp() - make_interval(secs => (q.options ->> 'retentionSeconds')::float8) AS cutoff
      FROM queen.queues q
      JOIN queen.partitions p ON p.queue_id = q.id
     WHERE COALESCE((q.options ->> 'retentionSeconds')::bigint, 0) > 0
), walk AS (
    SELECT part.id, part.cutoff, s.ctid, s.first_offset, s.frames, 1 AS n
      FROM part
     CROSS JOIN LATERAL (
        SELECT s.ctid, s.first_offset, s.last_offset - s.first_offset + 1 AS frames, s.created_at
          FROM queen.segments s
         WHERE s.partition_id = part.id
         ORDER BY s.first_offset
         LIMIT 1
     ) s
     WHERE s.created_at < part.cutoff
    UNION ALL
    SELECT w.id, w.cutoff, s.ctid, s.first_offset, s.frames, w.n + 1
      FROM walk w
     CROSS JOIN LATERAL (
        SELECT s.ctid, s.first_offset, s.last_offset - s.first_offset + 1 AS frames, s.created_at
          FROM queen.segments s
         WHERE s.partition_id = w.id AND s.first_offset > w.first_offset
         ORDER BY s.first_offset
         LIMIT 1
     ) s
     WHERE s.created_at < w.cutoff AND w.n < $1::bigint
), pick AS (
    SELECT x.ctid
      FROM (SELECT w.ctid, w.frames, sum(w.frames) OVER (ROWS UNBOUNDED PRECEDING) AS acc
              FROM (SELECT * FROM walk LIMIT $1::bigint) w) x
     WHERE x.acc - x.frames < $1::bigint
), d AS (
    DELETE FROM queen.segments s
     WHERE s.ctid = ANY (ARRAY(SELECT ctid FROM pick))
    RETURNING s.last_offset - s.first_offset + 1 AS frames
)
SELECT count(*), COALESCE(sum(frames), 0)::bigint FROM d
