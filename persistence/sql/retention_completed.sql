-- Deletes segments older than their queue's completedRetentionSeconds that
-- every consumer group of the queue has committed past (SPEC.md §6, §7): a
-- group has committed past a segment when its cursor in that partition is
-- at or above the segment's last offset; a group with no consumer row in a
-- partition (it never popped or acked there) has consumed nothing of it.
-- The groups of a queue are those with a consumer row or a subscription in
-- it; a queue with no group has nothing completed, so nothing is deleted.
-- $1 is the batch: at most $1 segments, and no more once those taken hold $1
-- messages (a segment is never split). Returns the segments and messages
-- deleted.
--
-- The walk is retention_sidecar's (per partition, oldest first through the
-- primary key, stopping at the first segment too young or not yet consumed
-- by every group); deletes by (tableoid, ctid) (a ctid alone is not unique across the partitions
-- of segments, migration 0010); no partition or consumer row lock.
--
-- Never past the sidecar's compaction (migration 0017): a segment stored at
-- or after the lower bound of the oldest level-0 range of the hash sidecar
-- that is not compacted yet stays, because a crash rebuilds that range from
-- the segments' hashes (queen.sidecar_refill).
WITH RECURSIVE q AS MATERIALIZED (
    SELECT q.id,
           LEAST(clock_timestamp() - make_interval(secs => (q.options ->> 'completedRetentionSeconds')::float8),
                 (SELECT COALESCE(min(r.lo), 'infinity'::timestamptz) FROM queen.sidecar_ranges r WHERE r.bits IS NULL)) AS cutoff
      FROM queen.queues q
     WHERE COALESCE((q.options ->> 'completedRetentionSeconds')::bigint, 0) > 0
), grp AS MATERIALIZED (
    SELECT c.queue_id, c.consumer_group FROM queen.consumers c WHERE c.queue_id IN (SELECT id FROM q)
    UNION
    SELECT s.queue_id, s.consumer_group FROM queen.subscriptions s WHERE s.queue_id IN (SELECT id FROM q)
), part AS MATERIALIZED (
    SELECT p.id, p.num, q.cutoff, min(COALESCE(c."cursor", -1)) AS bound
      FROM q
      JOIN queen.partitions p ON p.queue_id = q.id
      JOIN grp g ON g.queue_id = q.id
      LEFT JOIN queen.consumers c ON c.partition_id = p.id AND c.consumer_group = g.consumer_group
     GROUP BY p.id, p.num, q.cutoff
    HAVING min(COALESCE(c."cursor", -1)) >= 0
), walk AS (
    SELECT part.id, part.num, part.cutoff, part.bound, s.tableoid, s.ctid, s.first_offset, s.frames, 1 AS n
      FROM part
     CROSS JOIN LATERAL (
        SELECT s.tableoid, s.ctid, s.first_offset, s.last_offset, s.last_offset - s.first_offset + 1 AS frames, s.created_at
          FROM queen.segments s
         WHERE s.partition_num = part.num
           -- created_at grows with the offset: the oldest segment older than
           -- the cutoff is the oldest one, or there is none; the ranges stored
           -- after the cutoff are pruned (run-time partition pruning).
           AND s.created_at < part.cutoff
         ORDER BY s.first_offset
         LIMIT 1
     ) s
     WHERE s.created_at < part.cutoff AND s.last_offset <= part.bound
    UNION ALL
    SELECT w.id, w.num, w.cutoff, w.bound, s.tableoid, s.ctid, s.first_offset, s.frames, w.n + 1
      FROM walk w
     CROSS JOIN LATERAL (
        SELECT s.tableoid, s.ctid, s.first_offset, s.last_offset, s.last_offset - s.first_offset + 1 AS frames, s.created_at
          FROM queen.segments s
         WHERE s.partition_num = w.num AND s.first_offset > w.first_offset
           AND s.created_at < w.cutoff
         ORDER BY s.first_offset
         LIMIT 1
     ) s
     WHERE s.created_at < w.cutoff AND s.last_offset <= w.bound AND w.n < $1::bigint
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
