-- Purges aged-out sidecar rows (SPEC.md §7): the log_txns rows older than
-- GREATEST(dedupWindowSeconds, completedRetentionSeconds, $2 seconds - the
-- floor) of their queue. $1 is the batch: at most $1 log_txns rows (one per
-- segment, whatever its frames: deleting one costs the same for 1 frame or
-- 1,000). Returns the log_txns rows deleted and the frames they held.
--
-- Rows are found per partition, oldest first, through the primary key:
-- created_at is monotone in offset order within a partition (stamped under
-- the row lock), so a partition's purgeable rows are a prefix of it, and the
-- walk stops at its first younger row. Its cost follows the partitions and
-- the rows deleted, never the rows kept (a long window, or another queue's
-- rows, are not scanned). Rows are deleted by ctid. Partition rows are never
-- locked: pushes do not wait for this.
--
-- The per-hash rows (log_txn_hashes) of a purged segment stay until their
-- time range is dropped (sidecar_ranges_expired), but count for nothing from
-- this statement's commit on: the probe, transactions and ack resolution
-- read a per-hash row only while its segment's log_txns row exists. One row
-- per segment is deleted here, never one per hash.
WITH RECURSIVE part AS MATERIALIZED (
    SELECT p.id,
           clock_timestamp() - make_interval(secs => GREATEST(q.dedup_window_seconds::float8,
               COALESCE((q.options ->> 'completedRetentionSeconds')::float8, 0), $2::float8)) AS cutoff
      FROM queen.partitions p
      JOIN queen.queues q ON q.id = p.queue_id
), walk AS (
    SELECT part.id, part.cutoff, t.ctid, t.first_offset, t.frames, 1 AS n
      FROM part
     CROSS JOIN LATERAL (
        SELECT t.ctid, t.first_offset, t.last_offset - t.first_offset + 1 AS frames, t.created_at
          FROM queen.log_txns t
         WHERE t.partition_id = part.id
         ORDER BY t.first_offset
         LIMIT 1
     ) t
     WHERE t.created_at < part.cutoff
    UNION ALL
    SELECT w.id, w.cutoff, t.ctid, t.first_offset, t.frames, w.n + 1
      FROM walk w
     CROSS JOIN LATERAL (
        SELECT t.ctid, t.first_offset, t.last_offset - t.first_offset + 1 AS frames, t.created_at
          FROM queen.log_txns t
         WHERE t.partition_id = w.id AND t.first_offset > w.first_offset
         ORDER BY t.first_offset
         LIMIT 1
     ) t
     WHERE t.created_at < w.cutoff AND w.n < $1::bigint
), pick AS (
    SELECT w.ctid FROM walk w LIMIT $1::bigint
), d AS (
    DELETE FROM queen.log_txns t
     WHERE t.ctid = ANY (ARRAY(SELECT ctid FROM pick))
    RETURNING t.last_offset - t.first_offset + 1 AS frames
)
SELECT count(*), COALESCE(sum(frames), 0)::bigint FROM d
